"""The torch source excerpts and torch's own errors that lessons 02 and 03 show, on this torch."""

import re
from pathlib import Path

import matplotlib
import pytest
import torch

from ddp_lib.demos import placement_demos, spawning
from ddp_lib.plots.placement import (
    plot_backend_slots,
    plot_checkpoint_locations,
    plot_device_id_effects,
    plot_input_path,
    plot_nodes_and_gpus,
    plot_ranks_on_one_gpu,
    plot_visible_devices,
)
from ddp_lib.plots.spawning import plot_pickled_worker, plot_start_method_trees

matplotlib.use("Agg")
CHECKPOINT = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "saved_on_cuda0.pt"


def test_one_node_torchrun_without_a_port_switches_to_c10d_on_port_0():
    source = spawning.torchrun_rendezvous_source()
    assert 'args.rdzv_endpoint = "localhost:0"' in source and "args.master_port = 29500" in source


def test_ddp_moves_inputs_only_under_device_ids():
    source = placement_demos.ddp_moves_inputs_source()
    assert source.splitlines()[1] == "if self.device_ids:" and "_to_kwargs(" in source


def test_a_cuda_only_group_given_a_cpu_tensor_raises_torchs_error():
    error = placement_demos.cuda_only_group_with_cpu_tensor()
    assert error == "RuntimeError: No backend type associated with device type cpu"


def test_a_group_with_a_cpu_backend_all_reduces_the_cpu_tensor():
    assert placement_demos.cuda_only_group_with_cpu_tensor("cpu:gloo,cuda:gloo") == "no error"


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the checkpoint loads onto cuda:0")
def test_the_committed_gpu_checkpoint_needs_map_location_here():
    assert placement_demos.load_and_report(str(CHECKPOINT)).startswith(
        "RuntimeError: Attempting to deserialize object on a CUDA device")
    assert placement_demos.load_and_report(str(CHECKPOINT), map_location="cpu") == "loaded; tensors on cpu"


def test_the_pictures_draw():
    assert plot_pickled_worker().axes and plot_nodes_and_gpus().axes and plot_visible_devices().axes
    assert all(f().axes for f in (plot_input_path, plot_ranks_on_one_gpu, plot_checkpoint_locations,
                                  plot_device_id_effects))
    assert len(plot_start_method_trees(nprocs=2).axes) == 3


def test_torch_parses_cuda_visible_devices_up_to_the_first_invalid_entry(monkeypatch):
    # Lesson 03's Deeper section.
    for listed, parsed in (("2,3", [2, 3]), ("1,0", [1, 0]), ("0,-1,2", [0])):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
        assert torch.cuda._parse_visible_devices() == parsed


def test_fake_tensors_raise_torchs_device_mismatch_without_a_gpu():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(RuntimeError, match="^Expected all tensors to be on the same device"):
        torch.nn.functional.linear(torch.empty(20, 10), torch.empty(10, 10, device="cuda:0"))


def _c10d_source() -> str:
    import torch.distributed.distributed_c10d as c10d

    return Path(c10d.__file__).read_text()


def test_only_device_id_sets_the_default_groups_bound_device():
    # Lesson 03: init sets it from device_id; the file's other assignments are to split or shrunk groups.
    source = _c10d_source()
    assert "    if device_id:\n        pg.bound_device_id = device_id\n" in source
    assert sorted(re.findall(r"^\s*(\w+)\.bound_device_id = ", source, re.M)) == ["new_pg", "pg", "split_pg"]


def test_distributed_c10d_never_calls_set_device():
    # Lesson 03: only its docstrings name torch.cuda.set_device.
    assert re.search(r"^[^`]*set_device\(", _c10d_source(), re.M) is None


def test_ddp_returns_before_moving_inputs_only_in_two_modes():
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    source = inspect.getsource(DistributedDataParallel._pre_forward)
    before = source[:source.index("if self.device_ids:")]
    assert re.findall(r"if self\.(\w+):\n\s+return inputs, kwargs", before) == [
        "_use_python_reducer", "_delay_all_reduce_all_params"]


def test_torchrun_side_by_side_raises_a_failure_it_is_not_about(tmp_path):
    # Lesson 02 prints each job's exit code; a job that fails for another reason than a taken
    # port is raised with the end of torchrun's error output, so that its cause is on screen.
    script = tmp_path / "fails.py"
    script.write_text("import os, sys\nsys.exit(f'rank {os.environ[\"RANK\"]} gave up')\n")
    with pytest.raises(RuntimeError, match=r"exited with 1; its error output ends:\n") as caught:
        spawning.torchrun_side_by_side(str(script), jobs=1, nproc_per_node=1)
    assert "rank 0 gave up" in str(caught.value)


def test_backend_slots_picture_draws_a_slot_per_device_type():
    fig = plot_backend_slots()
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "cpu -> no backend" in texts and "cpu -> gloo" in texts and texts.count("cuda -> nccl") == 2
