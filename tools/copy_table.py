"""Write the README's "Copying a worker into your project" table from ddp_lib/workers/copying.py.

    python tools/copy_table.py           # rewrite the table
    python tools/copy_table.py --check   # exit 1 if the table is not what the map says

Each row: the worker module, the workers the command line lists from it (``ddp_lib.workers.WORKERS``,
by function name; ``train`` too), and the files to copy with it, with any optional package.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling tools, also when loaded by path
import marked_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = "<!-- copy table: written by tools/copy_table.py -->"
END = "<!-- end of copy table -->"


def workers_by_module() -> dict[str, list[str]]:
    from ddp_lib.workers import WORKERS

    # "run train" starts the lesson's train (ddp_lib/demos/training_runs.py), which runs train.py's
    # parts with the lesson's switches: without them, it computes what train.py's train computes.
    found: dict[str, list[str]] = {"train": ["train"]}
    for worker in WORKERS.values():
        module, function = worker.target.split(":")
        if not module.startswith("ddp_lib.workers."):
            continue
        names = found.setdefault(module.removeprefix("ddp_lib.workers."), [])
        if function not in names:
            names.append(function)
    return found


def table() -> str:
    from ddp_lib.workers.copying import FILES_TO_COPY, OPTIONAL_PACKAGES

    workers = workers_by_module()
    header = "| module in `ddp_lib/workers/` | workers `python -m ddp_lib run` starts | copy it with |"
    lines = [header, "|---|---|---|"]
    for module, files in FILES_TO_COPY.items():
        names = ", ".join(f"`{name}`" for name in workers.get(module, [])) or "none (the lesson's own)"
        copy = ", ".join(f"`{file}`" for file in files[1:]) or "nothing"
        extras = OPTIONAL_PACKAGES.get(module, {})
        if extras:
            copy += " (" + "; ".join(f"and `pip install {package}` for `{option}`"
                                     for package, option in extras.items()) + ")"
        lines.append(f"| `{module}.py` | {names} | {copy} |")
    return "\n".join(lines)


def with_table(text: str, rendered: str) -> str:
    return marked_table.with_table(text, rendered, START, END, README)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    return marked_table.rewrite_or_check(README, START, END, table, "the copy table", "tools/copy_table.py", argv)


if __name__ == "__main__":
    sys.exit(main())
