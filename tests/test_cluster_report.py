"""report_mistakes prints each job's nodes and checks each job's predicted outcome against it."""

from __future__ import annotations

from ddp_lib.cluster.jobs import HostsJob, NodeRun
from ddp_lib.cluster.mistakes import report_mistakes


def _node(host, returncode, error=""):
    return NodeRun(host=host, returncode=returncode, seconds=12.0, stderr="", agent_error=error, rendezvous_at=2.0)


def _jobs(world_of_3_then_2: int) -> dict[str, HostsJob]:
    timeout = "RendezvousTimeoutError: "
    ok_hosts = [{"rank": 0, "host": "node0", "hosts": ["node0", "node1"][:world_of_3_then_2]}]
    return {
        "rdzv_on_loopback": HostsJob([_node("node0", 1, timeout), _node("node1", 1, timeout)]),
        "gloo_on_eth0": HostsJob([_node("node0", 0), _node("node1", 0)], results=ok_hosts),
        "nnodes_3_then_2": HostsJob([_node("node0", 0), _node("node1", 0)], results=ok_hosts),
    }


def test_every_prediction_held_prints_true_lines(capsys):
    assert report_mistakes(_jobs(2)) is True
    out = capsys.readouterr().out
    assert "== gloo_on_eth0 (the correct job: the control)" in out
    assert "node0: failed (RendezvousTimeoutError" in out and "10 s after its rendezvous began" in out
    assert "rank 0 on node0: world size 2, hosts gathered ['node0', 'node1']" in out
    assert "rdzv_on_loopback: both nodes RendezvousTimeoutError, as predicted: True" in out
    assert "port_closed" not in out  # a job that did not run is not checked


def test_a_prediction_that_fails_is_reported(capsys):
    assert report_mistakes(_jobs(1)) is False
    assert "nnodes_3_then_2: succeeded, world size 2 though node0 said 3, as predicted: False" in \
        capsys.readouterr().out
