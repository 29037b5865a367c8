"""Output directories left by a launching process that was killed are removed by the next launch,
first, whatever happens after; a live process's directory is left alone."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

import pytest

from ddp_lib import _output, launch


def test_the_next_launch_removes_a_killed_launchers_directory_first(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)  # a launching process that has ended
    orphan = tmp_path / f"ddp_lib-{dead_pid}-x"
    ours = tmp_path / f"ddp_lib-{os.getpid()}-y"
    orphan.mkdir()
    ours.mkdir()
    # The sweep comes before anything else a launch does: even arguments that cannot be pickled
    # (refused here, past the launch's own checks) leave the orphan swept.
    with pytest.raises((pickle.PicklingError, AttributeError)):
        launch.run_job("x:y", 1, ((lambda: 0,), {}), [{}], start_method="forkserver", timeout=1,
                       show_output=False, pass_world_size=True)
    assert not orphan.exists() and ours.exists()
    _output.sweep_orphaned_logdirs()
    assert ours.exists()
