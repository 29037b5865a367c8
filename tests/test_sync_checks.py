"""Lesson 04's counts in a one-process group: DDP broadcasts its buffers at the first forward and at a
forward after a training forward; a forward through ``ddp_model.module`` leaves backward without an
all-reduce."""

import pytest

from ddp_lib.demos import sync_checks


def test_buffers_are_broadcast_after_a_training_forward_only():
    counts = sync_checks.buffer_broadcasts(("training", "training", "no_grad", "no_grad", "training", "no_sync",
                                            "training"))
    assert [b for _, b in counts] == [1, 1, 1, 0, 0, 1, 0]


def test_eval_mode_does_not_stop_the_buffer_broadcast():
    counts = sync_checks.buffer_broadcasts(("training", "eval_mode", "eval_mode"))
    assert [b for _, b in counts] == [1, 1, 1]


def test_a_second_comm_hook_and_bf16_on_a_cpu_build_are_refused():
    refusals = sync_checks.hook_refusals()
    assert refusals["a second hook"] == (
        "RuntimeError: register_comm_hook or register_builtin_comm_hook can only be called once.")
    assert refusals["bf16_compress_hook on this build of torch"].startswith(
        "TypeError: BF16 all reduce communication hook")


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="eval"):
        sync_checks.buffer_broadcasts(("eval",))


def test_a_forward_through_module_skips_the_allreduce():
    assert sync_checks.allreduces_per_backward(steps=2) == {"ddp_model(x)": [1, 1], "ddp_model.module(x)": [0, 0]}


def test_the_last_layers_bucket_goes_first_from_step_1():
    step0, step1 = sync_checks.bucket_layouts(layers=4, width=256, bucket_cap_mb=0.3, steps=2)
    assert len(step0) == 1 and len(step0[0]) == 8
    assert step1 == [["2.bias", "2.weight", "3.bias", "3.weight"], ["0.bias", "0.weight", "1.bias", "1.weight"]]


def test_each_construction_checks_and_sends_what_torch_says():
    found = sync_checks.construction_syncs()
    assert found["DDP(model)"] == {"shape_check": True, "parameters_sent": 4, "buffers_sent": 3, "warnings": []}
    assert found["init_sync=False"]["shape_check"] is False
    assert found["init_sync=False"]["parameters_sent"] + found["init_sync=False"]["buffers_sent"] == 0
    assert found["broadcast_buffers=False"]["buffers_sent"] == 0
    assert found["broadcast_buffers=False"]["warnings"] == ["FutureWarning"]
    assert found["forward_sync_buffers=False"]["buffers_sent"] == 3


def test_parameters_of_two_dtypes_and_a_sparse_gradient_go_to_separate_buckets():
    assert sync_checks.bucket_dtypes() == [("torch.float64", "dense", ["b.bias", "b.weight"]),
                                           ("torch.float32", "dense", ["a.bias", "a.weight"]),
                                           ("torch.float32", "sparse", ["e.weight"])]


def test_forward_sync_buffers_false_sends_no_buffer_in_any_forward():
    counts = sync_checks.buffer_broadcasts(("training", "training", "eval_mode", "training"),
                                           forward_sync_buffers=False)
    assert [n for _, n in counts] == [0, 0, 0, 0]


def test_autograd_grad_and_late_parameters_are_not_averaged():
    found = sync_checks.outside_the_averaging()
    assert found["torch.autograd.grad"] == {"allreduces": 0, "averaged": False, "next_forward": "runs"}
    assert found["a parameter added after DDP()"] == {"allreduces": 1, "averaged": False, "next_forward": "runs"}
    replaced = found["the weight replaced after DDP()"]
    assert (replaced["allreduces"], replaced["averaged"]) == (0, False)
    assert replaced["next_forward"].startswith("RuntimeError: Expected to have finished reduction")


def test_frozen_parameters_are_broadcast_but_not_shape_checked():
    assert sync_checks.frozen_parameters() == {"parameters": 4, "frozen": 2, "broadcast at construction": 4,
                                               "shape-checked": 2}


def test_unused_parameter_detected_at_any_forward_with_gradients_on():
    assert sync_checks.unused_parameter_detection() == [("training", "raises"), ("no_sync", "raises"),
                                                        ("eval_mode", "raises"), ("no_grad", "runs")]


def test_unused_parameter_detection_names_unknown_kinds():
    with pytest.raises(ValueError, match="unknown"):
        sync_checks.unused_parameter_detection(("inference",))


def test_torchs_buckets_of_the_lessons_mlp_pass_the_cap():
    from ddp_lib.workers.shared import make_mlp

    step0, step1 = sync_checks.bucket_layouts(width=8, bucket_cap_mb=0.001, steps=2, model=make_mlp(0))
    assert len(step0) == 1
    assert step1 == [["2.bias", "2.weight", "4.bias", "4.weight"], ["0.bias", "0.weight"]]


def test_importing_the_module_imports_what_ddp_imports_when_first_built():
    import subprocess
    import sys

    code = "import sys; import ddp_lib.demos.sync_checks; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
