"""Write the README's "Copying a worker into your project" table from ddp_lib/workers/copying.py.

    python tools/copy_table.py           # rewrite the table
    python tools/copy_table.py --check   # exit 1 if the table is not what the map says

Each row: the worker module, the workers the command line lists from it (``ddp_lib.workers.WORKERS``,
by function name; ``train`` too), and the files to copy with any optional package.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = "<!-- copy table: written by tools/copy_table.py -->"
END = "<!-- end of copy table -->"


def workers_by_module() -> dict[str, list[str]]:
    from ddp_lib.workers import WORKERS

    found: dict[str, list[str]] = {"train": ["train"]}
    for worker in WORKERS.values():
        module, function = worker.target.split(":")
        names = found.setdefault(module.removeprefix("ddp_lib.workers."), [])
        if function not in names:
            names.append(function)
    return found


def table() -> str:
    from ddp_lib.workers.copying import FILES_TO_COPY, OPTIONAL_PACKAGES

    workers = workers_by_module()
    lines = ["| module | workers | copy these files |", "|---|---|---|"]
    for module, files in FILES_TO_COPY.items():
        names = ", ".join(f"`{name}`" for name in workers.get(module, []))
        copy = ", ".join(f"`{file}`" for file in files)
        extras = OPTIONAL_PACKAGES.get(module, {})
        if extras:
            copy += " (" + "; ".join(f"and `pip install {package}` for `{option}`"
                                     for package, option in extras.items()) + ")"
        lines.append(f"| `ddp_lib/workers/{module}.py` | {names} | {copy} |")
    return "\n".join(lines)


def with_table(text: str, rendered: str) -> str:
    pattern = re.compile(re.escape(START) + r"\n.*?\n" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{README}: the markers {START!r} and {END!r} are missing")
    return pattern.sub(lambda _: f"{START}\n{rendered}\n{END}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the table is up to date")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    current = README.read_text()
    wanted = with_table(current, table())
    if args.check:
        if wanted != current:
            print("README.md: the copy table is out of date; run python tools/copy_table.py")
            return 1
        return 0
    if wanted != current:
        README.write_text(wanted)
        print("rewrote the copy table in README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
