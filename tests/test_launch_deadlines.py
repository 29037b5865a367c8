"""The deadline holds whatever happens to the processes around the ranks: a deadline that ends
before any rank has started, and a forkserver killed while the ranks run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import launcher_workers
import pytest

from conftest import pythonpath_with_tests
from ddp_lib.errors import LaunchTimeout
from ddp_lib.launch import run_ranks


@pytest.mark.parametrize("start_method, timeout", [(None, 0.01), ("spawn", 0.3)])
def test_a_deadline_before_any_rank_has_started_is_a_launch_timeout(start_method, timeout):
    with pytest.raises(LaunchTimeout, match=r"did not finish within its .* deadline; ranks 0, 1 still running"):
        run_ranks(launcher_workers.hang_all, 2, timeout=timeout, start_method=start_method, show_output=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kills the forkserver by its process id")
def test_a_killed_forkserver_does_not_defeat_the_deadline(tmp_path):
    driver = textwrap.dedent(f"""
        import os, signal, threading, time
        import multiprocessing.forkserver as forkserver
        import launcher_workers
        from ddp_lib.errors import LaunchTimeout
        from ddp_lib.launch import run_ranks

        def kill_forkserver_once_the_ranks_run():
            while len(os.listdir({str(tmp_path)!r})) < 2:
                time.sleep(0.05)
            os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)

        threading.Thread(target=kill_forkserver_once_the_ranks_run, daemon=True).start()
        try:
            run_ranks(launcher_workers.hang_all, 2, kwargs=dict(pid_dir={str(tmp_path)!r}), timeout=8,
                      show_output=False)
        except LaunchTimeout as e:
            print("LaunchTimeout:", e)
    """)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": pythonpath_with_tests()})
    assert "LaunchTimeout: the job did not finish within its 8 s deadline" in out.stdout, out.stderr[-3000:]
    assert time.monotonic() - start < 90
    ranks = [int((tmp_path / f"rank{r}.pid").read_text()) for r in range(2)]
    assert not _still_there(ranks)


def test_a_forkserver_killed_while_the_ranks_start_is_one_line_and_stops_the_started_ranks(tmp_path, monkeypatch):
    import signal
    from multiprocessing import forkserver, popen_forkserver

    from ddp_lib.errors import LaunchStartError

    launch_rank = popen_forkserver.Popen._launch
    launched = []

    def kill_the_forkserver_before_rank_1(self, process_obj):
        if len(launched) != 1:
            launched.append(process_obj)
            return launch_rank(self, process_obj)
        # Rank 0 has started. The forkserver dies (as an out-of-memory kill would end it) just after
        # multiprocessing checked that it runs, before it connects to start rank 1: the race, held open.
        launched.append(process_obj)
        server = forkserver._forkserver
        os.kill(server._forkserver_pid, signal.SIGKILL)
        os.waitid(os.P_PID, server._forkserver_pid, os.WEXITED | os.WNOWAIT)  # dead, left for multiprocessing to reap
        with monkeypatch.context() as checked:
            checked.setattr(server, "ensure_running", lambda: None)
            return launch_rank(self, process_obj)

    monkeypatch.setattr(popen_forkserver.Popen, "_launch", kill_the_forkserver_before_rank_1)
    with pytest.raises(LaunchStartError) as caught:
        run_ranks(launcher_workers.hang_all, 2, kwargs=dict(pid_dir=str(tmp_path)), show_output=False, timeout=60)
    assert str(caught.value) == ("the forkserver (the process that starts each rank) ended while rank 1 was starting "
                                 "(ConnectionRefusedError); the ranks started were stopped, and the next launch "
                                 "starts a new forkserver")
    monkeypatch.undo()
    assert _still_there(_pids(tmp_path)) == []
    assert run_ranks(launcher_workers.talk, 1, show_output=False) == [0]  # a new forkserver


def _pids(folder) -> list[int]:
    return [int(p.read_text()) for p in folder.glob("rank*.pid")]


def _still_there(pids: list[int], seconds: float = 10) -> list[int]:
    """The pids whose process still exists after up to ``seconds``: a rank whose parent (the forkserver)
    died is reaped by init, so its /proc entry can outlive the kill for a moment."""
    deadline = time.monotonic() + seconds
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
