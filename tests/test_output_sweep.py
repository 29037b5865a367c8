"""Folders left by a launching process that was killed are removed by the next launch, first,
whatever happens after; only those whose owner record proves it: never a folder of someone else's
that happens to be named like one, nor one of a live launch in another PID namespace."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile

import pytest

from ddp_lib import launch
from ddp_lib.launch import _output


def _made_by_a_process_that_ended(tmp_path) -> str:
    """A folder made by the launcher's own function in a process that has since exited."""
    code = "from ddp_lib.launch._output import owned_folder; print(owned_folder())"
    made = subprocess.run([sys.executable, "-c", code],
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp_path)}, check=True)
    return made.stdout.strip()


def _launch_that_fails_after_the_sweep() -> None:
    # Arguments that cannot be pickled are refused past the sweep, before any rank starts.
    with pytest.raises((pickle.PicklingError, AttributeError)):
        launch.run_job("x:y", 1, ((lambda: 0,), {}), [{}], start_method="forkserver", timeout=1,
                       show_output=False, pass_world_size=True)


def test_the_next_launch_removes_a_killed_launchers_folder_first(tmp_path, monkeypatch):
    orphan = _made_by_a_process_that_ended(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ours = _output.owned_folder()
    _launch_that_fails_after_the_sweep()
    assert not os.path.exists(orphan) and os.path.exists(ours)


def test_a_folder_named_like_the_launchers_without_its_owner_record_is_left_alone(tmp_path, monkeypatch):
    # The reproduction: a user's folder whose number is no live process id.
    users = tmp_path / "ddp_lib-4000000-my results"
    users.mkdir()
    (users / "results.csv").write_text("epoch,loss\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _launch_that_fails_after_the_sweep()
    assert (users / "results.csv").read_text() == "epoch,loss\n"


@pytest.mark.parametrize("other", [{"pid_namespace": "pid:[1]"}, {"boot": "another-boot"}])
def test_a_folder_made_in_another_pid_namespace_or_boot_is_left_alone(other, tmp_path, monkeypatch):
    # A live launch in a container that shares /tmp: its process id means nothing here.
    folder = _made_by_a_process_that_ended(tmp_path)
    record = os.path.join(folder, _output.OWNER_FILE)
    with open(record) as f:
        owner = json.load(f)
    with open(record, "w") as f:
        json.dump({**owner, **other}, f)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _launch_that_fails_after_the_sweep()
    assert os.path.exists(record)

