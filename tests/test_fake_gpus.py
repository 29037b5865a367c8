"""Lesson 03's fake-GPU forward: DDP's input move and the operator's device check, on a CPU build."""

from ddp_lib.demos.fake_gpus import forward_on_fake_gpu


def test_device_ids_moves_the_input_to_the_models_gpu():
    assert forward_on_fake_gpu(1, [1]) == "input arrived on cuda:1, output on cuda:1"


def test_a_wrong_index_or_no_move_meets_the_device_check():
    wrong = forward_on_fake_gpu(1, [0])
    assert wrong.startswith("RuntimeError: Expected all tensors to be on the same device")
    assert "cuda:0 and cuda:1" in wrong
    assert "cpu and cuda:1" in forward_on_fake_gpu(1, None)
    assert forward_on_fake_gpu(1, None, move_input=True) == "input arrived on cuda:1, output on cuda:1"


def test_a_model_on_two_gpus_needs_its_input_on_the_first_layers_gpu():
    from ddp_lib.demos.fake_gpus import forward_on_two_fake_gpus

    assert "cpu and cuda:0" in forward_on_two_fake_gpus(None)
    assert forward_on_two_fake_gpus("cuda:0") == "input arrived on cuda:0, output on cuda:1"
    assert "cuda:1 and cuda:0" in forward_on_two_fake_gpus("cuda:1")


def test_ddp_move_returns_a_tensor_already_on_the_device_as_itself():
    from ddp_lib.demos.fake_gpus import ddp_move_keeps_a_moved_tensor

    assert ddp_move_keeps_a_moved_tensor(1) is True
    assert ddp_move_keeps_a_moved_tensor(0) is True


def test_ddp_move_opens_a_dict_batch_but_not_a_dataclass():
    from ddp_lib.demos.fake_gpus import ddp_move_of_batches

    assert ddp_move_of_batches(1) == ["a dict batch: x on cuda:1, labels on cuda:1",
                                      "a dataclass batch: x on cpu, labels on cpu"]
