"""Lesson 00's fix for a busy port: the classic example runs on a free port while another job's store
holds the fixed one (real processes on gloo)."""

from datetime import timedelta

import torch.distributed as dist

import ddp_lib.mp
from ddp_lib.demos.port_choice import demo_basic
from ddp_lib.process_group import free_port, port_in_use


def test_the_job_runs_on_a_free_port_while_another_store_holds_one():
    held = dist.TCPStore("localhost", 0, world_size=1, is_master=True, timeout=timedelta(seconds=30))
    try:
        port = free_port()
        assert port != held.port
        result = ddp_lib.mp.labelled_spawn(demo_basic, args=(2, port), nprocs=2, join=True)
        assert port_in_use(held.port)  # the other store still listens
    finally:
        del held
    assert len(result) == 2 and len(result[0]) == 165
    assert result[0] == result[1]  # the replicas agree after one step


def test_the_job_fails_on_a_port_another_store_holds():
    held = dist.TCPStore("localhost", 0, world_size=1, is_master=True, timeout=timedelta(seconds=30))
    try:
        try:
            ddp_lib.mp.labelled_spawn(demo_basic, args=(1, held.port), nprocs=1, join=True, timeout=120)
        except Exception as exc:  # rank 0's store cannot listen there
            assert "EADDRINUSE" in str(exc) or "address already in use" in str(exc)
        else:
            raise AssertionError("a job on a held port should fail")
    finally:
        del held


def test_holder_summary_names_the_listening_child_by_pid():
    import subprocess
    import sys

    from ddp_lib.ports import holder_summary

    listen = ("import socket, time; s = socket.socket(); s.bind(('localhost', 0)); s.listen(); "
              "print(s.getsockname()[1], flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", listen], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        pid, command = holder_summary(port)
        assert pid == child.pid and command.startswith("python -c import socket,")
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
