"""Learners' answers for the exercise checkers' tests, written as files that the ranks import."""

import importlib
import textwrap


def load_answer(tmp_path, monkeypatch, name: str, source: str, function: str):
    """``function`` from ``source`` (dedented), written to ``tmp_path/name.py`` and imported from there."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return getattr(importlib.import_module(name), function)


def notebook_stub(notebook: str, path: str) -> str:
    """The text a lesson's ``%%exercise path`` cell writes: the learner's starting point."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / notebook).read_text())["cells"]
    head = f"%%exercise {path}\n"
    return next("".join(c["source"])[len(head):] for c in cells if "".join(c["source"]).startswith(head))
