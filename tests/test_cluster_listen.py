"""What torchrun's agent listens on, seen with ``ss -ltnp`` while a run is up: every interface,
whatever address it is given (torch 2.13). Lesson 06 and docs/cluster.md say so; this keeps them honest."""

from __future__ import annotations

import shutil
import socket
import sys

import pytest

from ddp_lib.process_group import free_port
from ddp_lib.torchrun import run_torchrun, torchrun_command

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("ss") is None,
                                reason="needs Linux and ss (iproute2)")

PROGRAM = ["-m", "ddp_lib.torchrun", "ddp_lib.cluster.probe:agent_listening"]
EVERY_INTERFACE = {"*", "0.0.0.0", "[::]"}


def test_standalone_agent_listens_on_every_interface():
    job = run_torchrun(torchrun_command(PROGRAM, nproc_per_node=1))
    assert job.returncode == 0, job.stderr[-2000:]
    # Two stores: the rendezvous store and the one the ranks share.
    assert len(job.results[0]) == 2 and set(job.results[0]) <= EVERY_INTERFACE, job.results


def test_loopback_endpoint_and_local_addr_do_not_narrow_it():
    endpoint = f"127.0.0.1:{free_port()}"
    cmd = torchrun_command(PROGRAM, nproc_per_node=1, nnodes=1, rdzv_endpoint=endpoint,
                           options=("--local-addr=127.0.0.1",))
    job = run_torchrun(cmd)
    assert job.returncode == 0, job.stderr[-2000:]
    assert job.results[0] and set(job.results[0]) <= EVERY_INTERFACE, job.results


def test_agent_listening_and_store_names_the_rank_s_host_and_store():
    listening = ["-m", "ddp_lib.torchrun", "ddp_lib.cluster.probe:agent_listening_and_store"]
    job = run_torchrun(torchrun_command(listening, nproc_per_node=1))
    assert job.returncode == 0, job.stderr[-2000:]
    seen = job.results[0]
    assert seen["host"] == socket.gethostname() and seen["MASTER_ADDR"], seen
    assert len(seen["listening"]) == 2 and set(seen["listening"]) <= EVERY_INTERFACE, seen
    # One of the agent's two stores is the ranks' store, at the MASTER_PORT its ranks were given.
    assert len(seen["ports"]) == 2 and seen["MASTER_PORT"] in seen["ports"], seen


def test_the_agent_s_ports_are_the_rendezvous_port_and_master_port():
    endpoint_port = free_port()
    listening = ["-m", "ddp_lib.torchrun", "ddp_lib.cluster.probe:agent_listening_and_store"]
    cmd = torchrun_command(listening, nproc_per_node=1, nnodes=1, rdzv_endpoint=f"127.0.0.1:{endpoint_port}",
                           options=("--local-addr=127.0.0.1",))
    job = run_torchrun(cmd)
    assert job.returncode == 0, job.stderr[-2000:]
    seen = job.results[0]
    assert seen["ports"] == sorted([endpoint_port, seen["MASTER_PORT"]]), seen


def test_listening_unavailable_names_what_is_missing(monkeypatch):
    from ddp_lib.cluster import probe

    monkeypatch.setattr(probe.shutil, "which", lambda tool: None)
    assert probe.listening_unavailable() == "it needs Linux and ss (iproute2)"
    monkeypatch.setattr(probe.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(probe.sys, "platform", "linux")
    assert probe.listening_unavailable() is None
