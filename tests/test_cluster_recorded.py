"""The cluster lab shows real output everywhere: where its cells cannot run, each prints the stored
transcript of a real run, labelled as recorded (no root, no network namespaces, macOS)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddp_lib.cluster.recorded import RECORDED, live_or_recorded

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "06b_cluster_lab.ipynb"


def recorded_names() -> list[str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return [m for c in cells if c["cell_type"] == "code"
            for m in re.findall(r'live_or_recorded\("(\w+)"', "".join(c["source"]))]


def test_every_live_cell_has_a_transcript_of_a_real_run():
    names = recorded_names()
    assert len(names) >= 4
    for name in names:
        text = (RECORDED / f"{name}.txt").read_text()
        assert text.startswith("recorded: a real run of this cell on Linux as root"), name
        assert "skipped" not in text and text.count("\n") >= 2, name


def test_a_kernel_that_cannot_run_the_cell_prints_the_transcript_labelled(capsys):
    live_or_recorded("hosts", "not root", lambda: print("must not run"))
    shown = capsys.readouterr().out
    stored = (RECORDED / "hosts.txt").read_text().partition("\n")[2]
    assert shown.startswith("[recorded: a real run of this cell on Linux as root")
    assert "This kernel cannot run it: not root.]" in shown.splitlines()[0]
    assert shown.endswith(stored) and "must not run" not in shown


def test_a_kernel_that_can_run_the_cell_runs_it_and_records_nothing(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("DDP_LIB_RECORD", raising=False)
    monkeypatch.setattr("ddp_lib.cluster.recorded.RECORDED", tmp_path)
    live_or_recorded("demo", None, lambda: print("live output"))
    assert capsys.readouterr().out == "live output\n" and not list(tmp_path.iterdir())


def test_a_missing_transcript_is_an_error_not_a_sentence(capsys):
    with pytest.raises(FileNotFoundError, match="no_such_cell.txt is missing"):
        live_or_recorded("no_such_cell", "not root", lambda: print("must not run"))
    assert capsys.readouterr().out == ""
