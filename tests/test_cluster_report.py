"""report_mistakes prints each job's nodes and checks each job's predicted outcome against it."""

from __future__ import annotations

import os
import time

from ddp_lib.cluster.jobs import HostsJob, NodeRun, outcome_at
from ddp_lib.cluster.mistakes import report_mistakes
from ddp_lib.launch._record import AGENT_ERROR_FILE, ERROR_FILE, RESULT_FILE


def _node(host, returncode, error="", stderr="", outcome=12.0):
    return NodeRun(host=host, returncode=returncode, seconds=20.0, stderr=stderr, agent_error=error,
                   rendezvous_at=2.0, outcome_at=outcome)


def _jobs(world_of_3_then_2: int, node1_of_2_then_3: NodeRun | None = None) -> dict[str, HostsJob]:
    timeout = "RendezvousTimeoutError"  # as agent_error reads it
    ok_hosts = [{"rank": 0, "host": "node0", "hosts": ["node0", "node1"][:world_of_3_then_2]}]
    lost_store = ("Traceback (most recent call last):\n...\n"
                  "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d "
                  "store has failed. See inner exception for details.\n")
    node1 = node1_of_2_then_3 or _node("node1", 1, "DistNetworkError: Failed to recv", stderr=lost_store)
    loopback = HostsJob([_node("node0", 1, timeout), _node("node1", 1, timeout)])
    loopback.node1_listened = True  # node1 hosted a rendezvous store of its own (rdzv_on_loopback watches for it)
    # The agent's INFO log once its rendezvous completed, as master_addr reads it.
    rendezvous_done = "[I1208 00:31:02.000 api.py:123]   master_addr=node0\n"
    refused = "RuntimeError: Gloo connectFullMesh failed with [...] Connection refused, remote=[127.0.0.1]:41234$0"
    waited = "RuntimeError: Gloo connectFullMesh failed with [...] Connect timeout [none]"
    return {
        "rdzv_on_loopback": loopback,
        "gloo_on_loopback": HostsJob([_node("node0", 1, waited, stderr=rendezvous_done, outcome=55.0),
                                      _node("node1", 1, refused, stderr=rendezvous_done, outcome=4.0)]),
        "gloo_on_eth0": HostsJob([_node("node0", 0), _node("node1", 0)], results=ok_hosts),
        "nnodes_3_then_2": HostsJob([_node("node0", 0), _node("node1", 0)], results=ok_hosts),
        "nnodes_2_then_3": HostsJob([_node("node0", 1, timeout, outcome=62.0), node1]),
    }


def test_every_prediction_held_prints_true_lines(capsys):
    assert report_mistakes(_jobs(2)) is True
    out = capsys.readouterr().out
    assert "== gloo_on_eth0 (the correct job: the control)" in out
    # The seconds run from the rendezvous's start to the first error (or the result), not to the exit.
    assert "node0: failed (RendezvousTimeoutError), its first error 10 s after its rendezvous began" in out
    assert "node0: succeeded, its result 10 s after its rendezvous began" in out
    assert "rank 0 on node0: world size 2, hosts gathered ['node0', 'node1']" in out
    assert ("rdzv_on_loopback: node1 listens on 29400: a rendezvous store of its own; both nodes "
            "RendezvousTimeoutError, at least the 10 s join_timeout after their rendezvous began, "
            "as predicted: True") in out
    assert "gloo_on_loopback: the rendezvous completed on both nodes;" in out
    assert "after its rendezvous began, as predicted: True" in out.split("gloo_on_loopback: the rendezvous")[1]
    assert ("nnodes_2_then_3: failed: node0 RendezvousTimeoutError, node1 RendezvousClosedError or "
            "RendezvousConnectionError, as predicted: True") in out
    # The job that succeeded against node0's flag prints how many hosts hello returned on each rank.
    assert ("nnodes_3_then_2: succeeded, world size 2 though node0 said 3 (hosts hello returned: 2 on rank 0), "
            "as predicted: True") in out
    assert "port_closed" not in out  # a job that did not run is not checked


def test_a_prediction_that_fails_is_reported(capsys):
    assert report_mistakes(_jobs(1)) is False
    assert ("nnodes_3_then_2: succeeded, world size 2 though node0 said 3 (hosts hello returned: 1 on rank 0), "
            "as predicted: False") in capsys.readouterr().out


def test_a_gloo_wait_shorter_than_five_group_timeouts_or_no_rendezvous_is_not_as_predicted(capsys):
    jobs = _jobs(2)
    jobs["gloo_on_loopback"].nodes[0].outcome_at = 40.0  # 38 s after its rendezvous began: under 5 x 10 s
    jobs["rdzv_on_loopback"].node1_listened = False  # node1 never hosted a store of its own
    assert report_mistakes(jobs) is False
    out = capsys.readouterr().out
    assert "as predicted: False" in out.split("gloo_on_loopback: the rendezvous")[1]
    assert "as predicted: False" in out.split("rdzv_on_loopback: node1 listens")[1].splitlines()[0]


def test_a_timeout_that_came_too_soon_or_the_wrong_node_s_error_is_not_as_predicted(capsys):
    jobs = _jobs(2, node1_of_2_then_3=_node("node1", 1, "RendezvousTimeoutError"))
    jobs["rdzv_on_loopback"].nodes[0].outcome_at = 9.0  # 7 s after its rendezvous began, before its join deadline
    assert report_mistakes(jobs) is False
    out = capsys.readouterr().out
    assert "rendezvous began, as predicted: False" in out
    assert "RendezvousConnectionError, as predicted: False" in out


def test_outcome_at_is_the_first_error_file_or_the_last_result(tmp_path):
    started = time.time() - 100
    run = tmp_path / "two-hosts_x" / "attempt_0" / "0"
    run.mkdir(parents=True)

    class Rank:
        folder = run

    def touch(path, seconds):
        path.write_text("{}")
        os.utime(path, (started + seconds, started + seconds))

    assert outcome_at(str(tmp_path), [Rank()], 1, started) is None  # no file: no outcome
    touch(run / ERROR_FILE, 14.0)
    touch(tmp_path / AGENT_ERROR_FILE, 19.0)  # torchrun copies the rank's error later, as it exits
    assert abs(outcome_at(str(tmp_path), [Rank()], 1, started) - 14.0) < 0.01
    touch(run / RESULT_FILE, 8.0)
    assert abs(outcome_at(str(tmp_path), [Rank()], 0, started) - 8.0) < 0.01
