"""A notebook kernel's first launch says why its cell is blank for a while: one fixed line when it
starts the forkserver (which imports torch), never at a later launch, never on the command line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from multiprocessing import forkserver
from pathlib import Path

import pytest

from conftest import pythonpath_with_tests
from ddp_lib.launch import _forkserver

ROOT = Path(__file__).resolve().parent.parent

# Two launches in a fresh Python; with "kernel", IPython reports a shell with a kernel, as in Jupyter.
TWO_LAUNCHES = """
import sys, types
import IPython
if sys.argv[1:] == ["kernel"]:
    IPython.get_ipython = lambda: types.SimpleNamespace(kernel=object())
from ddp_lib.launch import run_ranks
import launcher_workers
print("first:", run_ranks(launcher_workers.talk, 2, kwargs=dict(lines=1), show_output="stdout"), flush=True)
print("second:", run_ranks(launcher_workers.talk, 2, kwargs=dict(lines=1), show_output="stdout"), flush=True)
"""


def test_a_kernel_is_told_once_before_its_first_launch_starts_the_forkserver():
    done = subprocess.run([sys.executable, "-c", TWO_LAUNCHES, "kernel"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath_with_tests()}, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        _forkserver.FORKSERVER_NOTICE,  # before anything the ranks print
        "[rank 0] line 0 from rank 0", "[rank 1] line 0 from rank 1", "first: [0, 10]",
        "[rank 0] line 0 from rank 0", "[rank 1] line 0 from rank 1", "second: [0, 10]",
    ]


@pytest.fixture
def no_forkserver_started(monkeypatch):
    """The forkserver reported as not running, and nothing started for real."""
    monkeypatch.setattr(_forkserver, "_forkserver_running", lambda: False)
    monkeypatch.setattr(forkserver, "ensure_running", lambda: None)


def as_a_kernel(monkeypatch):
    ipython = types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace(kernel=object()))
    monkeypatch.setitem(sys.modules, "IPython", ipython)


def test_the_command_line_and_a_terminal_ipython_are_not_told(no_forkserver_started, monkeypatch, capsys):
    _forkserver.start_deaf_to_ctrl_c()  # a script, or python -m ddp_lib: no IPython shell
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace()))
    _forkserver.start_deaf_to_ctrl_c()  # a terminal IPython: a shell without a kernel
    assert capsys.readouterr() == ("", "")


def test_a_kernel_whose_forkserver_runs_is_not_told(monkeypatch, capsys):
    as_a_kernel(monkeypatch)
    monkeypatch.setattr(_forkserver, "_forkserver_running", lambda: True)
    monkeypatch.setattr(forkserver, "ensure_running", lambda: None)
    _forkserver.start_deaf_to_ctrl_c()
    assert capsys.readouterr() == ("", "")
    monkeypatch.setattr(_forkserver, "_forkserver_running", lambda: False)
    _forkserver.start_deaf_to_ctrl_c()
    assert capsys.readouterr() == (_forkserver.FORKSERVER_NOTICE + "\n", "")


def test_a_forkserver_that_exited_counts_as_not_running_and_is_left_for_multiprocessing_to_reap(monkeypatch):
    server = forkserver._forkserver
    sleeper = os.spawnv(os.P_NOWAIT, "/bin/sleep", ["sleep", "30"])
    exited = os.spawnv(os.P_NOWAIT, "/bin/true", ["true"])
    try:
        monkeypatch.setattr(server, "_forkserver_pid", sleeper)
        assert _forkserver._forkserver_running()
        monkeypatch.setattr(server, "_forkserver_pid", exited)
        deadline = time.monotonic() + 10
        while _forkserver._forkserver_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _forkserver._forkserver_running()
        monkeypatch.setattr(server, "_forkserver_pid", None)
        assert not _forkserver._forkserver_running()
    finally:
        os.kill(sleeper, 9)
        os.waitpid(sleeper, 0)
        assert os.waitpid(exited, 0)[0] == exited  # still there to reap: the check did not take it
