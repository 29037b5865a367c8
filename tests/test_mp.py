"""ddp_lib.mp, the drop-in for torch.multiprocessing.spawn, with real processes on gloo."""

import pickle
import signal
import socket
import time

import launcher_workers
import pytest
import torch.multiprocessing
import tutorial_workers

import ddp_lib.mp as mp
from ddp_lib.errors import LaunchInputError, WorkerError


@pytest.fixture
def own_port(monkeypatch):
    """A port the tutorial's setup() keeps (it only sets MASTER_PORT when unset), free a moment ago:
    tests running at once on one machine must not share the tutorial's fixed 12355."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    return port


def test_the_call_is_fn_i_args_and_the_results_come_back_in_rank_order():
    assert mp.labelled_spawn(launcher_workers.mp_rank, args=(10,), nprocs=3, join=True) == [0, 10, 20]


def test_the_tutorials_worker_runs_unchanged_with_its_own_port_many_times(own_port):
    # The worker picks the address and port; rank 0 hosts the store there, as under torch.
    for _ in range(10):
        assert mp.labelled_spawn(tutorial_workers.demo_basic, args=(2,), nprocs=2) == [None, None]


def test_a_taken_port_is_named_with_the_process_holding_it(own_port):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", own_port))
        squatter.listen()
        start = time.monotonic()
        with pytest.raises(WorkerError) as info:
            mp.labelled_spawn(tutorial_workers.demo_basic, args=(2,), nprocs=2, timeout=60)
    import os

    assert f"port {own_port} is already taken by process {os.getpid()}" in str(info.value)
    assert time.monotonic() - start < 30


def test_join_false_is_refused_in_one_line():
    with pytest.raises(LaunchInputError, match=r"^join must be True, got False: .*ProcessContext"):
        mp.labelled_spawn(launcher_workers.mp_rank, args=(1,), nprocs=2, join=False)


def test_a_worker_error_names_the_rank():
    with pytest.raises(WorkerError, match=r"\(rank 0\): TypeError: mp_rank\(\) missing 1 required"):
        mp.labelled_spawn(launcher_workers.mp_rank, args=(), nprocs=2)  # mp_rank needs its scale


@pytest.mark.parametrize("how", ["sys.exit(0)", "exit()", "os._exit(0)"])
def test_an_early_exit_with_code_0_is_a_finished_rank_as_under_torch(how):
    # torch's _wrap catches Exception only: SystemExit(0) ends the process with code 0, which
    # ProcessContext.join counts as success.
    assert mp.labelled_spawn(launcher_workers.mp_end_early, args=(how,), nprocs=2) == [0, None]


def test_a_raised_error_is_torchs_process_raised_exception_with_its_fields():
    try:
        mp.labelled_spawn(launcher_workers.mp_end_early, args=("raise",), nprocs=2)
    except torch.multiprocessing.ProcessRaisedException as e:  # code written for torch runs unchanged
        assert isinstance(e, WorkerError) and isinstance(e, mp.RankRaisedError)
        assert (e.error_index, e.rank) == (1, 1)
        assert isinstance(e.error_pid, int) and e.error_pid > 0
        assert e.msg.startswith("\n\n-- Process 1 terminated with the following error:\nTraceback")
        assert "ValueError: rank 1 was told to fail" in e.msg
        assert str(e) == ("Process 1 terminated with the following error (rank 1): "
                          "ValueError: rank 1 was told to fail")
        assert "ValueError: rank 1 was told to fail" in str(e.__cause__)
        assert pickle.loads(pickle.dumps(e)).msg == e.msg
    else:
        pytest.fail("no error raised")


@pytest.mark.parametrize("how, exit_code, signal_name, text", [
    ("sys.exit(3)", 3, None, "process 1 terminated with exit code 3"),
    ("sys.exit(text)", 1, None, "process 1 terminated with exit code 1"),
    ("SIGABRT", -signal.SIGABRT, "SIGABRT", "process 1 terminated with signal SIGABRT"),
])
def test_an_exit_is_torchs_process_exited_exception_with_its_fields(how, exit_code, signal_name, text):
    with pytest.raises(torch.multiprocessing.ProcessExitedException) as info:
        mp.labelled_spawn(launcher_workers.mp_end_early, args=(how,), nprocs=2)
    e = info.value
    assert isinstance(e, WorkerError) and isinstance(e, mp.RankExitedError)
    assert (e.error_index, e.exit_code, e.signal_name) == (1, exit_code, signal_name)
    assert e.error_pid > 0
    assert str(e) == e.msg == text
