"""A functools.partial worker: keywords it binds reach the worker; positional arguments it binds are
refused before any process starts, since torch's mp.spawn would pass them before the rank."""

import functools

import pytest

from ddp_lib import mp
from ddp_lib.errors import LaunchInputError
from ddp_lib.launch import _job, run_ranks
from ddp_lib.workers.faulty_ranks import raise_on_rank


@pytest.mark.parametrize("launcher", [lambda fn: run_ranks(fn, 2),
                                      lambda fn: mp.labelled_spawn(fn, args=(2,), nprocs=2)],
                         ids=["ddp_lib.launch.run_ranks", "ddp_lib.mp.labelled_spawn"])
def test_a_partial_binding_positional_arguments_is_refused_before_any_process_starts(launcher, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started for bad input")

    monkeypatch.setattr(_job.Job, "start", refuse)
    with pytest.raises(LaunchInputError) as caught:
        launcher(functools.partial(raise_on_rank, 2))
    message = str(caught.value)
    assert "functools.partial(raise_on_rank, 2) binds positional arguments" in message
    assert "before the rank" in message and "\n" not in message


def test_torchs_own_mp_spawn_passes_a_partials_arguments_before_the_rank():
    # The behaviour the refusal guards against, on torch's own launcher: f(*bound, i, *args).
    import torch.multiprocessing as torch_mp

    context = torch_mp.start_processes(functools.partial(_first_two, "bound"), args=(), nprocs=1, join=False,
                                       start_method="fork")
    assert context.join() and context.processes[0].exitcode == 0


def _first_two(first, second):
    assert (first, second) == ("bound", 0), (first, second)


def test_a_partial_binding_keywords_still_runs():
    assert run_ranks(functools.partial(raise_on_rank, bad_rank=5), 2, show_output=False) == [0, 1]
