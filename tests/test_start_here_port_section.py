"""Lesson 00's optional "Address already in use" section runs on its own, after the lesson's first
two sections only, as its opening promises: no name it uses and no my_work file it imports comes from
a skipped cell. The cells run in a fresh folder whose my_work holds only the committed __init__.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "00_start_here.ipynb"


def _section(cells, first_heading, next_heading):
    """The cells from the heading cell that starts with first_heading up to the one that starts with next_heading."""
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(first_heading)]
    ends = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(next_heading)]
    assert len(starts) == 1 and len(ends) == 1, (first_heading, next_heading)
    return cells[starts[0]:ends[0]]


def test_port_section_runs_after_the_first_sections_alone(tmp_path):
    nb = nbformat.read(LESSON, as_version=4)
    kept = (_section(nb.cells, "# 00 · Start here", "### Deeper: where torch passes")
            + _section(nb.cells, '### "Address already in use" on a re-run', "## Where to go next"))
    subset = nbformat.v4.new_notebook(cells=kept, metadata=nb.metadata)
    (tmp_path / "my_work").mkdir()
    shutil.copy(ROOT / "notebooks" / "my_work" / "__init__.py", tmp_path / "my_work" / "__init__.py")
    env_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)  # the kernel imports this ddp_lib
    try:
        NotebookClient(subset, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if env_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_path
    text = "".join(o.get("text", "") for c in subset.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "rank 0 failed:" in text  # the busy port was reproduced
    assert "the run works again, replicas equal: True" in text
