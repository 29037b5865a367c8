"""Lesson 03: where tensors live, on gloo with real processes (the GPU-only workers are skipped here)."""

import os

import pytest
import torch

from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.launch import run_ranks
from ddp_lib.workers import placement

no_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour")


@pytest.mark.parametrize("move_inputs", [False, True])
def test_a_cpu_model_sees_its_input_on_the_cpu_on_any_machine(move_inputs):
    kwargs = dict(pass_device_ids=False, move_inputs=move_inputs, device="cpu")
    results = run_ranks(placement.input_placement, 2, kwargs=kwargs, show_output=False)
    assert results == [{"model_on": "cpu", "input_seen_on": "cpu", "output_on": "cpu"}] * 2


def test_without_device_ids_a_moved_input_reaches_the_model_on_its_device():
    results = run_ranks(placement.input_placement, 2, (False, True), show_output=False)
    for rank, r in enumerate(results):
        assert r["model_on"] == r["input_seen_on"] == r["output_on"] == placement.expected_device(rank)


def test_without_device_ids_an_unmoved_input_stays_on_the_cpu():
    """On the CPU the model takes it; on a GPU nothing moves it, and the first layer refuses it."""
    if not torch.cuda.is_available():
        results = run_ranks(placement.input_placement, 2, (False, False), show_output=False)
        assert [r["input_seen_on"] for r in results] == ["cpu", "cpu"]
        return
    with pytest.raises(WorkerError) as info:
        run_ranks(placement.input_placement, 2, (False, False), show_output=False)
    assert info.value.exc_type == "RuntimeError"
    assert "Expected all tensors to be on the same device" in info.value.message


def test_device_ids_with_a_cpu_model_is_a_value_error_on_any_machine():
    with pytest.raises(WorkerError) as info:
        run_ranks(placement.input_placement, 2, kwargs=dict(pass_device_ids=True, device="cpu"), show_output=False)
    assert info.value.exc_type == "ValueError"
    assert "module parameters {device(type='cpu')}" in info.value.message


@cpu_only
def test_device_ids_with_a_cpu_model_is_a_value_error():
    with pytest.raises(WorkerError) as info:
        run_ranks(placement.input_placement, 2, (True, False), show_output=False)
    assert info.value.exc_type == "ValueError"
    assert "device_ids and output_device arguments only work with" in info.value.message
    assert "module parameters {device(type='cpu')}" in info.value.message


@no_gpus
def test_device_ids_moves_cpu_inputs_to_the_gpu():
    results = run_ranks(placement.input_placement, 2, (True, False), show_output=False)
    assert [r["input_seen_on"] for r in results] == ["cuda:0", "cuda:1"]


def test_two_nodes_of_two_ranks_number_gpus_from_zero_on_each_node():
    results = run_ranks(placement.simulate_nodes, 4, (2, "ddp_lib.workers.placement:where_am_i"), show_output=False)
    ranks = [(r["RANK"], r["LOCAL_RANK"], r["GROUP_RANK"]) for r in results]
    assert ranks == [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    assert [r["right_gpu"] for r in results] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert all(r["WORLD_SIZE"] == 4 and r["LOCAL_WORLD_SIZE"] == 2 for r in results)


def _where_am_i_without_local_rank(rank, world_size):
    """where_am_i as under plain mp.spawn, which sets no LOCAL_RANK."""
    os.environ.pop("LOCAL_RANK", None)
    return placement.where_am_i(rank, world_size)


def test_where_am_i_takes_the_rank_as_local_rank_where_no_launcher_set_it():
    results = run_ranks(_where_am_i_without_local_rank, 2, show_output=False)
    assert [r["LOCAL_RANK"] for r in results] == [0, 1]
    assert [r["right_gpu"] for r in results] == ["cuda:0", "cuda:1"]


def test_map_location_puts_the_checkpoint_on_each_ranks_device(tmp_path):
    results = run_ranks(placement.checkpoint_devices, 2, (str(tmp_path / "ck.pt"),), show_output=False)
    saved_from = placement.expected_device(0)
    for rank, r in enumerate(results):
        assert r["saved_on"] == [saved_from]
        assert r["loaded_without_map_location"] == saved_from  # rank 0's device, on every rank
        assert r["loaded_with_map_location"] == placement.expected_device(rank)
    assert results[0]["checksum"] == results[1]["checksum"]


@cpu_only
def test_a_checkpoint_saved_as_cuda0_fails_to_load_on_cpu_without_map_location(tmp_path):
    results = run_ranks(placement.checkpoint_devices, 2, (str(tmp_path / "ck.pt"),), kwargs=dict(saved_as="cuda:0"),
                        show_output=False)
    for r in results:
        assert r["saved_on"] == ["cuda:0"]  # every rank reads rank 0's device
        assert r["loaded_without_map_location"].startswith("RuntimeError: Attempting to deserialize object on a CUDA")
        assert r["loaded_with_map_location"] == "cpu"
    assert results[0]["checksum"] == results[1]["checksum"]


def test_saving_as_another_device_leaves_torch_save_as_it_was(tmp_path):
    before = list(torch.serialization._package_registry)
    placement._save({"t": torch.ones(1)}, str(tmp_path / "a.pt"), "cuda:0")
    assert torch.serialization._package_registry == before
    torch.save({"t": torch.ones(1)}, tmp_path / "b.pt")
    assert torch.load(tmp_path / "b.pt")["t"].device.type == "cpu"


@cpu_only
def test_nccl_is_refused_before_starting_without_gpus():
    with pytest.raises(LaunchInputError, match="backend 'nccl' needs CUDA GPUs"):
        run_ranks(placement.nccl_cpu_tensor, 2, backend="nccl")


@no_gpus
def test_nccl_with_a_cpu_tensor_fails():
    with pytest.raises(WorkerError, match="No backend type associated with device type cpu"):
        run_ranks(placement.nccl_cpu_tensor, 2, backend="nccl", show_output=False)


def test_with_set_device_is_without_set_device_plus_one_line():
    # Lesson 03 shows the two GPU-only workers side by side as "the same worker with one more line".
    import difflib
    import inspect

    from ddp_lib.workers import placement as workers

    def body(fn):  # the code after the docstring
        lines = inspect.getsource(fn).splitlines()
        end = next(i for i, line in enumerate(lines) if line.rstrip().endswith('"""') and i > 1)
        return [line for line in lines[end + 1:] if not line.strip().startswith("#")]

    diff = [d for d in difflib.ndiff(body(workers.without_set_device), body(workers.with_set_device))
            if d[:2] in ("- ", "+ ")]
    assert len(diff) == 1 and diff[0].startswith("+ ") and "torch.cuda.set_device(rank)" in diff[0]
