"""Print a notebook as plain text, cell by cell, so that ``git diff`` shows what changed.

Used as git's textconv for ``*.ipynb`` (see .gitattributes; ``make setup-git`` runs
``git config diff.ipynb.textconv "python3 tools/nbdiff_text.py"``). Standard library only, so
any Python 3 works, inside or outside the project's virtual environment.

    python3 tools/nbdiff_text.py notebooks/00_start_here.ipynb
"""

from __future__ import annotations

import hashlib
import json
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def indented(body: str, prefix: str = "    ") -> list[str]:
    return [prefix + line for line in body.rstrip("\n").split("\n")] if body.strip() else []


def output_lines(output: dict) -> list[str]:
    kind = output.get("output_type")
    if kind == "stream":
        return [f"  [{output.get('name', 'stdout')}]", *indented(text(output.get("text", "")))]
    if kind == "error":
        traceback = ANSI.sub("", "\n".join(output.get("traceback", [])))
        return [f"  [error] {output.get('ename')}: {output.get('evalue')}", *indented(traceback)]
    lines, data = [], output.get("data", {})
    for mime, value in sorted(data.items()):
        body = text(value) if isinstance(value, (str, list)) else json.dumps(value, indent=1, sort_keys=True)
        if mime.startswith("image/") and mime != "image/svg+xml":
            # Pictures as a short fingerprint: a changed plot shows as one changed line.
            digest = hashlib.sha1(body.encode()).hexdigest()[:12]
            lines.append(f"  [{kind} {mime}] sha1 {digest}, {len(body)} characters of base64")
        elif mime == "text/plain" or "text/plain" not in data:
            lines += [f"  [{kind} {mime}]", *indented(body)]
        else:
            lines.append(f"  [{kind} {mime}] ({len(body)} characters; text/plain shown)")
    return lines


def render(nb: dict) -> str:
    lines = ["notebook metadata: " + json.dumps(nb.get("metadata", {}), sort_keys=True)]
    for index, cell in enumerate(nb.get("cells", [])):
        kind = cell.get("cell_type")
        head = f"==== cell {index} {kind}"
        if kind == "code":
            head += f" [{cell.get('execution_count')}]"
        tags = cell.get("metadata", {}).get("tags")
        if tags:
            head += " tags: " + ", ".join(tags)
        other = {k: v for k, v in cell.get("metadata", {}).items() if k != "tags"}
        if other:
            head += " metadata: " + json.dumps(other, sort_keys=True)
        lines += ["", head, *text(cell.get("source", "")).split("\n")]
        for output in cell.get("outputs", []):
            lines += output_lines(output)
    return "\n".join(lines) + "\n"


def main(paths: list[str]) -> int:
    for path in paths:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        try:
            sys.stdout.write(render(json.loads(raw)))
        except (ValueError, AttributeError):
            sys.stdout.write(raw)  # not a notebook git can parse: show it as it is
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
