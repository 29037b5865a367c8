"""The rank named when several fail is the first that failed for a reason of its own, not one
whose connection broke because that rank went away (real processes; see errors.is_peer_failure)."""

from __future__ import annotations

import pytest
import stress_workers

from ddp_lib.errors import WorkerError, is_peer_failure
from ddp_lib.launch import run_ranks


def test_a_rank_failing_on_its_own_is_named_although_its_words_look_like_gloos():
    with pytest.raises(WorkerError) as info:
        run_ranks(stress_workers.peer_failure_then_own, 3, ("timeout",), show_output=False)
    assert str(info.value) == "rank 1 raised TimeoutError: Timed out waiting for the data files to appear"
    assert sorted(info.value.failures) == [0, 1]


def test_a_rank_killed_from_outside_is_named_not_the_peer_it_broke():
    with pytest.raises(WorkerError) as info:
        run_ranks(stress_workers.peer_failure_then_own, 3, ("sigterm",), show_output=False)
    assert str(info.value) == "rank 1 was killed by SIGTERM before returning a result"


@pytest.mark.parametrize(("exc_type", "message", "peer"), [
    ("RuntimeError", stress_workers.GLOO_PEER_GONE, True),
    ("DistBackendError", "anything torch's c10d raises as a Dist*Error", True),
    ("RuntimeError", "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 5000 ms", True),
    ("TimeoutError", "Timed out waiting for the data files to appear", False),
    ("ValueError", "Connection closed by the learner's own server", False),
    ("", "was killed by SIGTERM before returning a result", False),
])
def test_only_torchs_own_errors_are_peer_failures(exc_type, message, peer):
    assert is_peer_failure(exc_type, message) is peer
