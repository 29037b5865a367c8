"""Lesson 03's fake-GPU forward: DDP's input move and the operator's device check, on a CPU build."""

from ddp_lib.demos.fake_gpus import forward_on_fake_gpu


def test_device_ids_moves_the_input_to_the_models_gpu():
    assert forward_on_fake_gpu(1, [1]) == "input arrived on cuda:1, output on cuda:1"


def test_a_wrong_index_or_no_move_meets_the_device_check():
    wrong = forward_on_fake_gpu(1, [0])
    assert "Expected all tensors to be on the same device" in wrong and "cuda:0 and cuda:1" in wrong
    assert "cpu and cuda:1" in forward_on_fake_gpu(1, None)
    assert forward_on_fake_gpu(1, None, move_input=True) == "input arrived on cuda:1, output on cuda:1"
