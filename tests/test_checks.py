"""Bad input is refused with one clear line before any process starts."""

import threading

import pytest

from ddp_lib import launch as launch_module
from ddp_lib.errors import LaunchInputError
from ddp_lib.launch import spawn
from ddp_lib.workers.basic import demo_basic


@pytest.fixture(autouse=True)
def no_process_may_start(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started for bad input")

    monkeypatch.setattr(launch_module._Job, "start", refuse)


def defined_in_main(rank, world_size):
    return rank


defined_in_main.__module__ = "__main__"


def make_closure():
    def inner(rank, world_size):
        return rank

    return inner


def refused(match: str, *args, **kwargs) -> str:
    with pytest.raises(LaunchInputError, match=match) as info:
        spawn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("world_size, shown", [(0, "got 0"), (-2, "got -2"), (2.5, "got 2.5"), ("2", "got '2'"),
                                               (True, "got True"), (None, "got None")])
def test_world_size_must_be_a_whole_number_of_at_least_one(world_size, shown):
    message = refused("world_size must be", demo_basic, world_size)
    assert shown in message and "1 or more" in message


def test_args_that_is_not_a_tuple_is_the_args_equals_paren_x_trap():
    message = refused("args must be a tuple", demo_basic, 2, args=(4))
    assert "got int 4" in message and "args=(4,)" in message
    assert "args=tuple([1, 2])" in refused("args must be a tuple", demo_basic, 2, args=[1, 2])


def test_args_that_cannot_be_sent_to_children():
    refused("arguments cannot be sent to the child processes", demo_basic, 2, args=(threading.Lock(),))


def test_a_function_defined_in_main_or_a_notebook_is_refused_with_the_fix():
    message = refused("defined in __main__", defined_in_main, 2)
    assert "%%writefile" in message and "import it" in message


def test_lambdas_and_closures_are_refused():
    refused("lambda or a nested function", lambda rank, world_size: rank, 2)
    refused("lambda or a nested function", make_closure(), 2)


def test_something_that_is_not_a_function():
    refused("the worker must be a function, got int 3", 3, 2)


def test_unknown_backend_lists_what_is_accepted():
    message = refused("unknown backend 'mpich'", demo_basic, 2, backend="mpich")
    assert "'gloo'" in message and "'nccl'" in message


def test_nccl_without_cuda_is_refused():
    import torch

    if torch.cuda.is_available():
        refused("needs one GPU per rank", demo_basic, torch.cuda.device_count() + 1, backend="nccl")
    else:
        refused("backend 'nccl' needs CUDA GPUs and none is available here", demo_basic, 2, backend="nccl")


def test_mpi_is_refused_with_the_reason():
    refused("needs processes started by mpirun", demo_basic, 2, backend="mpi")


def test_bad_start_method_and_timeout():
    refused("start_method must be one of", demo_basic, 2, start_method="thread")
    refused("timeout must be a number of seconds above 0", demo_basic, 2, timeout=0)
    refused("timeout must be a number of seconds above 0", demo_basic, 2, timeout="5")
