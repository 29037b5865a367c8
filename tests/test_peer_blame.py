"""The rank named when several fail is the first that failed for a reason of its own, not one
whose connection broke because that rank went away (real processes; see errors.may_be_echo)."""

from __future__ import annotations

import pytest
import stress_workers

from ddp_lib.errors import Failure, WorkerError, blamed_rank, may_be_echo
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


def _raised_in(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("it did not raise")


def test_a_peer_failure_is_told_by_the_type_and_where_it_was_raised_never_by_the_words():
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def gloo_like():  # a RuntimeError raised inside torch.distributed's own file, as gloo's errors reach Python
        exec(compile(f"raise RuntimeError({stress_workers.GLOO_PEER_GONE!r})", c10d.__file__, "exec"))

    assert may_be_echo(_raised_in(gloo_like))
    assert may_be_echo(dist.DistBackendError("anything torch's c10d raises as a Dist*Error"))
    assert not may_be_echo(_raised_in(lambda: (_ for _ in ()).throw(RuntimeError(stress_workers.GLOO_PEER_GONE))))
    assert not may_be_echo(TimeoutError("Timed out waiting for the data files to appear"))
    assert not may_be_echo(ValueError("Connection closed by the learner's own server"))


def test_when_every_failure_may_be_an_echo_the_first_to_fail_is_blamed_as_torch_elastic_does():
    failures = {0: Failure("RuntimeError", "reset", echo=True, time=17.5),
                1: Failure("RuntimeError", "mismatch", echo=True, time=12.0),
                2: Failure("DistBackendError", "closed", echo=True)}
    assert blamed_rank(failures) == 1
    # Failing at the same moment (every rank's collective raising the same error): the lowest rank, every run.
    assert blamed_rank({0: failures[0], 1: failures[1]._replace(time=17.2)}) == 0
    assert blamed_rank({**failures, 3: Failure("ValueError", "own", time=99.0)}) == 3
