"""``%%exercise my_work/FILE.py``: ``%%writefile`` that keeps a file the learner changed (``--reset`` overwrites),
and keeps the text it replaces in ``FILE.py.previous`` (an answer typed in the cell is not lost when a
fresh copy of the lesson runs the cell's stub again)."""

import hashlib
import json
from pathlib import Path

USAGE = "usage: %%exercise [--reset] my_work/FILE.py"
RECORD = ".exercise_stubs.json"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_stub(line: str, cell: str) -> str:
    """Write ``cell`` to the file named on ``line`` unless the learner changed that file; say what was done."""
    words = line.split()
    paths, reset = [w for w in words if w != "--reset"], "--reset" in words
    if len(paths) != 1 or len(words) - len(paths) > 1 or not paths[0].endswith(".py"):
        raise ValueError(f"%%exercise {line.strip()!r}: {USAGE}")
    path = Path(paths[0])
    record_path = path.parent / RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if path.exists() and not reset and _digest(path.read_text()) not in (record.get(path.name), _digest(cell)):
        return (f"Kept {path}: it was changed outside this cell, so the cell did not overwrite it. "
                f"To replace it with this cell's text, run the cell as %%exercise --reset {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = path.read_text() if path.exists() else cell
    if previous != cell:
        path.with_name(path.name + ".previous").write_text(previous)
    path.write_text(cell)
    record[path.name] = _digest(cell)
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return f"Wrote {path}." + (f" Its previous text is in {path}.previous." if previous != cell else "")


def load_ipython_extension(ipython) -> None:
    def exercise(line: str, cell: str) -> None:
        print(write_stub(line, cell))
    ipython.register_magic_function(exercise, magic_kind="cell", magic_name="exercise")
