"""Process-group setup and teardown, device and backend choice, in this process."""

import os

import pytest
import torch
import torch.distributed as dist

from ddp_lib.device import default_backend
from ddp_lib.errors import LaunchInputError
from ddp_lib.launch._checks import launch_backend
from ddp_lib.process_group import (
    DEFAULT_MASTER_PORT,
    backend_for,
    device_for,
    env_int,
    is_main,
    local_device,
    process_group,
    setup,
    teardown,
    threads_per_rank,
    usable_cores,
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "DDP_LIB_BACKEND", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.delenv(name, raising=False)
    yield
    teardown()


def test_a_single_process_group_can_be_joined_twice_in_one_process(clean_env):
    for _ in range(2):
        with process_group(0, 1) as device:
            assert dist.is_initialized() and dist.get_world_size() == 1 and is_main()
            assert dist.get_backend() == backend_for(device)
            t = torch.ones(3)
            dist.all_reduce(t)
            assert t.tolist() == [1.0, 1.0, 1.0]
        assert not dist.is_initialized()
    assert os.environ["MASTER_ADDR"] == "127.0.0.1"  # loopback unless told otherwise



def test_a_chosen_cpu_device_joins_with_gloo_whatever_the_launcher_chose(clean_env, monkeypatch):
    monkeypatch.setenv("DDP_LIB_BACKEND", "nccl")  # as the launcher sets it on a node with GPUs
    with process_group(0, 1, device="cpu") as device:
        assert device == torch.device("cpu") and dist.get_backend() == "gloo"
        assert dist.distributed_c10d._get_default_group().bound_device_id is None  # no GPU bound

def test_nested_setup_keeps_the_existing_group(clean_env):
    with process_group(0, 1):
        with process_group(0, 1):
            pass
        assert dist.is_initialized()  # the inner block did not create it, so did not destroy it
        with pytest.raises(RuntimeError, match="already rank 0 of 1"):
            setup(1, 2)


def test_rank_and_world_size_come_from_the_environment_as_under_torchrun(clean_env, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with process_group() as device:
        assert dist.get_rank() == 0 and device == device_for(0)


def test_missing_or_bad_environment_is_named(clean_env, monkeypatch):
    with pytest.raises(RuntimeError, match="RANK is not set"):
        setup()
    monkeypatch.setenv("RANK", "zero")
    with pytest.raises(RuntimeError, match=r"RANK='zero' is not an integer"):
        env_int("RANK")


def test_an_explicit_backend_is_validated(clean_env):
    with pytest.raises(ValueError, match="unknown backend 'smoke-signals'"):
        setup(0, 1, backend="smoke-signals")
    with pytest.raises(LaunchInputError, match="unknown backend 'smoke-signals'"):  # the launcher's check
        launch_backend("smoke-signals", 1)


def test_without_master_port_the_ranks_meet_on_the_tutorials_default(clean_env, monkeypatch):
    # Rank 1 sets the same address and port as rank 0 and then connects; joining is not needed
    # to see what it chose, so init is replaced here (real launches are in test_copy_workers.py).
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: None)
    setup(1, 2)
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("127.0.0.1", str(DEFAULT_MASTER_PORT))
    monkeypatch.setenv("MASTER_PORT", "23456")  # the environment wins
    setup(1, 2)
    assert os.environ["MASTER_PORT"] == "23456"


def test_the_group_is_bound_to_a_device_only_on_cuda(clean_env, monkeypatch):
    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: calls.append(kwargs))
    device = setup(0, 1)
    # init_process_group refuses a CPU device_id ("must be an accelerator with an index").
    assert ("device_id" in calls[0]) == (device.type == "cuda")
    if device.type == "cuda":
        assert calls[0]["device_id"] == device


def test_backend_for_is_torchs_default_map():
    for device_type, backend in dist.Backend.default_device_backend_map.items():
        assert backend_for(torch.device(device_type)) == backend


def test_device_and_backend_choice_on_this_machine():
    if torch.cuda.is_available():
        assert device_for(0) == torch.device("cuda", 0) and default_backend(1) == "nccl"
    else:
        assert device_for(0) == torch.device("cpu") and default_backend(4) == "gloo"
    assert backend_for(torch.device("cpu")) == "gloo" and backend_for(torch.device("cuda", 1)) == "nccl"
    assert launch_backend("GLOO", 2) == "gloo"


@pytest.mark.parametrize("gpus, local_rank, expected", [
    (0, 1, "cpu"),  # no CUDA: every rank on the CPU
    (2, 1, "cuda:1"),  # every rank sees the node's GPUs: cuda:LOCAL_RANK
    (1, 1, "cuda:0"),  # each rank sees only its own GPU (CUDA_VISIBLE_DEVICES per rank)
    (4, 5, "cuda:1"),  # more local ranks than GPUs: the index stays valid
])
def test_local_device_is_local_rank_modulo_the_visible_gpus(monkeypatch, gpus, local_rank, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert local_device(local_rank) == torch.device(expected) == device_for(local_rank)


def test_default_backend_is_nccl_only_with_a_gpu_per_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [default_backend(n) for n in (1, 2, 3)] == ["nccl", "nccl", "gloo"]


def test_threads_per_rank_share_the_cores():
    cores = usable_cores()
    assert threads_per_rank(1) == cores
    assert threads_per_rank(cores * 2) == 1
    assert threads_per_rank(2) * 2 <= max(cores, 2)
