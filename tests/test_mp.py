"""ddp_lib.mp, the drop-in for torch.multiprocessing.spawn, with real processes on gloo."""

import socket
import time

import launcher_workers
import pytest
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
    assert mp.spawn(launcher_workers.mp_rank, args=(10,), nprocs=3, join=True) == [0, 10, 20]


def test_the_tutorials_worker_runs_unchanged_with_its_own_port_many_times(own_port):
    # The worker picks the address and port; rank 0 hosts the store there, as under torch.
    for _ in range(10):
        assert mp.spawn(tutorial_workers.demo_basic, args=(2,), nprocs=2) == [None, None]


def test_a_taken_port_is_named_with_the_process_holding_it(own_port):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", own_port))
        squatter.listen()
        start = time.monotonic()
        with pytest.raises(WorkerError) as info:
            mp.spawn(tutorial_workers.demo_basic, args=(2,), nprocs=2, timeout=60)
    import os

    assert f"port {own_port} is already taken by process {os.getpid()}" in str(info.value)
    assert time.monotonic() - start < 30


def test_join_false_is_refused_in_one_line():
    with pytest.raises(LaunchInputError, match=r"^join must be True, got False"):
        mp.spawn(launcher_workers.mp_rank, args=(1,), nprocs=2, join=False)


def test_a_worker_error_names_the_rank():
    with pytest.raises(WorkerError, match=r"^rank 0 raised TypeError: mp_rank\(\) missing 1 required"):
        mp.spawn(launcher_workers.mp_rank, args=(), nprocs=2)  # mp_rank needs its scale
