"""Bad input is refused with one clear line before any process starts."""

import threading

import pytest

from ddp_lib.errors import LaunchInputError
from ddp_lib.launch import _job, run_ranks
from ddp_lib.workers.basic import demo_basic


@pytest.fixture(autouse=True)
def no_process_may_start(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a process was started for bad input")

    monkeypatch.setattr(_job.Job, "start", refuse)


def defined_in_main(rank, world_size):
    return rank


defined_in_main.__module__ = "__main__"


def make_closure():
    def inner(rank, world_size):
        return rank

    return inner


def refused(match: str, *args, **kwargs) -> str:
    with pytest.raises(LaunchInputError, match=match) as info:
        run_ranks(*args, **kwargs)
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


def test_worker_values_declared_wrong_for_their_name_are_refused():
    from ddp_lib.workers.train import train

    assert refused("batch_size must be", train, 2, kwargs=dict(batch_size=0)) == \
        "batch_size must be a whole number, 1 or more, at most 2147483647, got 0"
    refused(r"epochs must be a whole number, 1 or more, got 0", train, 2, args=(0,))  # by position too
    refused(r"lr must be a finite number above 0, got nan", train, 2, kwargs=dict(lr=float("nan")))
    refused(r"batch_size must be a whole number, 1 or more, at most 2147483647, got 16.0", train, 2,
            kwargs=dict(batch_size=16.0))


def test_a_choice_outside_the_workers_literal_is_refused():
    from cli_workers import configured

    refused(r"norm must be one of 'none', 'batch', 'sync', got 'layer'", configured, 2, kwargs=dict(norm="layer"))


def test_arguments_that_do_not_fit_the_signature_are_left_to_the_worker(monkeypatch):
    from ddp_lib.launch._checks import check_worker_arguments
    from ddp_lib.workers.train import train

    check_worker_arguments(train, (), {"no_such_option": 1})  # the worker's own TypeError names the rank
    check_worker_arguments(train, (3, 16, 0.1), {})


# What torchrun's agent sets for each worker (torch 2.13); the values are one worker of two.
TORCHRUN_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "0", "ROLE_NAME": "default", "ROLE_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none",
                "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
                "TORCHELASTIC_USE_AGENT_STORE": "True"}


def test_torchrun_is_recognised_only_from_every_variable_it_sets():
    from ddp_lib.launch._checks import TORCHRUN_VARS, torchrun_mode

    assert set(TORCHRUN_ENV) >= set(TORCHRUN_VARS)
    assert torchrun_mode(TORCHRUN_ENV) is True
    assert torchrun_mode(TORCHRUN_ENV, "2") is True
    assert torchrun_mode({"MASTER_ADDR": "localhost", "MASTER_PORT": "12355"}) is False  # a tutorial's exports
    assert torchrun_mode({}) is False
    with pytest.raises(LaunchInputError, match=r"^RANK set in the environment but not LOCAL_RANK, WORLD_SIZE"):
        torchrun_mode({"RANK": "0"})
    partial = {k: v for k, v in TORCHRUN_ENV.items() if k != "TORCHELASTIC_RUN_ID"}
    with pytest.raises(LaunchInputError, match=r"but not TORCHELASTIC_RUN_ID: this is not a rank started by torchrun"):
        torchrun_mode(partial)
    with pytest.raises(LaunchInputError, match=r"--world-size 3 contradicts WORLD_SIZE=2 set by torchrun"):
        torchrun_mode(TORCHRUN_ENV, "3")


@pytest.mark.parametrize("name", ["WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
                                  "LOCAL_WORLD_SIZE"])
def test_env_may_not_override_what_the_launcher_sets(name):
    from ddp_lib.launch._checks import check_env, check_launch

    with pytest.raises(LaunchInputError, match=f"^env may not set {name}: the launcher sets") as info:
        check_env({name: "1", "OMP_NUM_THREADS": "1"}, 2)
    assert "\n" not in str(info.value)
    with pytest.raises(LaunchInputError, match=f"^env may not set {name}"):
        check_launch(demo_basic, 2, timeout=10.0, env={name: "1"})
    with pytest.raises(LaunchInputError, match=fr"^env\[1\] may not set {name}"):
        check_launch(demo_basic, 2, timeout=10.0, env=[{}, {name: "1"}])
    assert check_env({"OMP_NUM_THREADS": 2}, 2) == [{"OMP_NUM_THREADS": "2"}] * 2


def test_env_per_rank_is_a_list_of_one_dict_per_rank():
    from ddp_lib.launch._checks import check_env

    assert check_env([{"A": 1}, {"A": "x"}], 2) == [{"A": "1"}, {"A": "x"}]
    assert check_env(None, 3) == [{}] * 3
    with pytest.raises(LaunchInputError, match=r"^env is a list of 3 dicts for world_size 2: give one dict per rank"):
        check_env([{}, {}, {}], 2)
    with pytest.raises(LaunchInputError, match=r"^env\[0\] must be a dict of environment variable names"):
        check_env(["A=1", {}], 2)


def test_world_size_beyond_one_machine_is_refused_with_the_way_out(monkeypatch):
    from ddp_lib.launch._checks import MAX_WORLD_SIZE, check_world_size

    monkeypatch.delenv("DDP_LIB_MAX_WORLD_SIZE", raising=False)
    message = refused("world_size 1000000000 is more processes than one machine should run", demo_basic,
                      1_000_000_000)
    assert f"at most {MAX_WORLD_SIZE}" in message and "torchrun" in message and "DDP_LIB_MAX_WORLD_SIZE" in message
    refused(f"world_size {MAX_WORLD_SIZE + 1} is more", demo_basic, MAX_WORLD_SIZE + 1)
    assert check_world_size(MAX_WORLD_SIZE) == MAX_WORLD_SIZE
    monkeypatch.setenv("DDP_LIB_MAX_WORLD_SIZE", "200")
    assert check_world_size(200) == 200
    refused("world_size 201 is more .*at most 200", demo_basic, 201)
    monkeypatch.setenv("DDP_LIB_MAX_WORLD_SIZE", "lots")
    refused(r"DDP_LIB_MAX_WORLD_SIZE must be a whole number \(ASCII digits\), 1 or more, got 'lots'", demo_basic, 2)


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, float("nan"), 0, -1, 604800.5])
def test_timeouts_that_would_fail_after_the_ranks_start_are_refused(timeout):
    refused(r"timeout must be a number of seconds above 0 and at most 604800 \(a week\), or None", demo_basic, 2,
            timeout=timeout)


@pytest.mark.parametrize("name, value, accepted", [
    ("OMP_NUM_THREADS", "0", "OMP_NUM_THREADS must be a whole number of threads per rank (ASCII digits), 1 to 4096, "
                         "got '0'"),
    ("OMP_NUM_THREADS", "abc", "OMP_NUM_THREADS must be a whole number of threads per rank (ASCII digits), 1 to 4096, "
                         "got 'abc'"),
    ("OMP_NUM_THREADS", "4,2", "OMP_NUM_THREADS must be a whole number of threads per rank (ASCII digits), 1 to 4096, "
                         "got '4,2'"),
    ("TORCH_DISTRIBUTED_DEBUG", "bogus", "TORCH_DISTRIBUTED_DEBUG must be one of OFF, INFO, DETAIL (any case), "
                                         "got 'bogus'"),
])
def test_bad_environment_values_are_refused_naming_the_variable(monkeypatch, name, value, accepted):
    from ddp_lib.launch._checks import check_env

    with pytest.raises(LaunchInputError) as info:
        check_env({name: value}, 2)  # env= of a launch
    assert str(info.value) == accepted
    monkeypatch.setenv(name, value)  # inherited from the caller's environment
    assert refused(name, demo_basic, 2) == accepted


def test_good_environment_values_pass(monkeypatch):
    from ddp_lib.launch._checks import check_env

    assert check_env({"OMP_NUM_THREADS": "3", "TORCH_DISTRIBUTED_DEBUG": "detail"}, 1) == [{
        "OMP_NUM_THREADS": "3", "TORCH_DISTRIBUTED_DEBUG": "detail"}]


@pytest.mark.parametrize("value", ["no", "stderr", 0, None])
def test_show_output_other_than_true_false_or_stdout_is_refused_before_anything_starts(value):
    from ddp_lib.launch import launch
    from ddp_lib.workers.basic import demo_basic

    with pytest.raises(LaunchInputError, match=r"^show_output must be True, False or 'stdout', got "):
        launch(demo_basic, 2, show_output=value)


def test_ranks_started_inside_a_torchrun_rank_do_not_write_to_its_error_file(monkeypatch):
    from ddp_lib.launch import rank_environments

    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", "/tmp/outer-rank/error.json")
    for envs in (rank_environments(2, "gloo", None, store_port=12345), rank_environments(2, "gloo", None, None)):
        assert all("TORCHELASTIC_ERROR_FILE" not in env for env in envs)
