"""ddp_lib.demos.torchrun_view under a real torchrun, and ddp_lib.demos.finally_barrier's hidden root error."""

import socket
import subprocess
import sys

import torch.multiprocessing as mp

from conftest import run_launcher
from ddp_lib.demos.finally_barrier import barrier_in_finally
from ddp_lib.demos.torchrun_view import views_from, views_of_ranks
from ddp_lib.process_group import free_port


def test_torchrun_sets_the_rank_variables():
    try:  # held, as lesson 02's cell holds it: torchrun on one node, given no port, picks a free one
        port_29500 = socket.create_server(("127.0.0.1", 29500))
    except OSError:  # another process holds it already, which serves as well
        port_29500 = None
    try:
        done = run_launcher([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                             "-m", "ddp_lib.demos.torchrun_view"], timeout=300)
    finally:
        if port_29500 is not None:
            port_29500.close()
    assert done.returncode == 0, done.stderr
    views = views_from(done.stdout)
    assert [view["env"]["RANK"] for view in views] == ["0", "1"]
    assert {view["env"]["WORLD_SIZE"] for view in views} == {"2"}
    assert {view["env"]["MASTER_PORT"] for view in views} == {"set"}
    ports = {view["master_port"] for view in views}  # the number behind "set": one port, not the default
    assert len(ports) == 1 and isinstance(next(iter(ports)), int) and 29500 not in ports
    # torchrun's agent, the ranks' parent, serves the store on MASTER_PORT; no rank does
    assert [view["store"] for view in views] == [{"agent": True, "rank": False}] * 2
    # torchrun starts each rank in a session of its own, so outside its caller's OS process group
    assert all(view["own session"] for view in views)


def test_views_read_from_outside_match_what_the_ranks_print(tmp_path):
    # main() ends in milliseconds (its ranks import no torch); these ranks stay until the views are read,
    # as the lesson's DDP ranks do for seconds, so a loaded machine cannot end them before they are seen
    seen = tmp_path / "seen"
    rank_script = tmp_path / "rank_that_waits.py"
    rank_script.write_text("import os, sys, time\n"
                           "from ddp_lib.demos.torchrun_view import main\n"
                           "main()\n"
                           "deadline = time.monotonic() + 300\n"
                           "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
                           "    time.sleep(0.02)\n")
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                            str(rank_script), str(seen)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        outside = views_of_ranks(job.pid, nprocs=2)
    finally:
        seen.touch()
        stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr
    assert outside == views_from(stdout)  # the same environment and the same listener, rank by rank


def test_a_barrier_in_finally_hides_the_root_error():
    try:
        mp.start_processes(barrier_in_finally, args=(2, f"tcp://127.0.0.1:{free_port()}", 1, 1.0),
                           nprocs=2, start_method="forkserver")
    except mp.ProcessRaisedException as failure:
        last = failure.msg.strip().splitlines()[-1]
        # gloo words the peer's failure several ways (a timeout, a closed connection, "Application
        # timeout caused pair closure"); what matters is that the group's RuntimeError is reported,
        # not rank 1's own ValueError.
        assert last.startswith("RuntimeError"), last
    else:
        raise AssertionError("the job should fail")


def test_run_holding_port_runs_torchrun_while_the_port_is_held(tmp_path):
    """Lesson 02's torchrun cell: the job runs while 29500 is held, and the views read from /proc
    match what the ranks print themselves."""
    from ddp_lib.demos.torchrun_view import run_holding_port

    rank_script = tmp_path / "rank_that_waits.py"  # the ranks live long enough to be read from outside
    rank_script.write_text("import time\nfrom ddp_lib.demos.torchrun_view import main\nmain()\ntime.sleep(3)\n")
    called = []
    run, views = run_holding_port(rank_script, nprocs=2, hold=29500, while_starting=lambda: called.append(1))
    assert run.returncode == 0, run.stderr
    assert called == [1]
    assert views == views_from(run.stdout)
    assert all(view["master_port"] != 29500 for view in views)
    with socket.create_server(("127.0.0.1", 0)):  # the held port was given back
        pass
    socket.create_server(("127.0.0.1", 29500)).close()
