"""Lesson 09's plain train.py runs under torchrun on 2 CPU ranks, logs one global loss per epoch
and the held-out accuracy from rank 0, leaves rank 0's checkpoint, and resumes from it exactly."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_launcher, torch_aborted_at_exit

SCRIPT = Path(__file__).resolve().parent.parent / "ddp_lib" / "demos" / "plain_train.py"


def _run(cwd: Path, *options: str) -> subprocess.CompletedProcess:
    torchrun = Path(sys.executable).with_name("torchrun")
    for attempt in range(2):
        done = run_launcher([str(torchrun), "--nproc-per-node", "2", str(SCRIPT), *options], cwd=cwd,
                            timeout=180)
        # torch's own abort at exit, once the checkpoint is saved, is tried once more; any other
        # failure, or the abort twice, fails the test.
        if not (torch_aborted_at_exit(done.stderr) and (cwd / "checkpoint.pt").exists() and attempt == 0):
            break
        (cwd / "checkpoint.pt").unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(("epoch ", "held-out accuracy"))]


def test_plain_train_runs_under_torchrun_and_resumes_exactly(tmp_path):
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    unbroken.mkdir()
    broken.mkdir()
    lines = _lines(_run(unbroken))
    assert [line.split(":")[0] for line in lines[:3]] == ["epoch 0", "epoch 1", "epoch 2"]
    assert lines[3].startswith("held-out accuracy ") and len(lines) == 4
    assert float(lines[2].split()[-1]) < float(lines[0].split()[-1])  # the loss falls
    assert float(lines[3].split()[-1]) > 0.75  # it learns: chance is 0.5
    assert (unbroken / "checkpoint.pt").exists()
    first = _lines(_run(broken, "--epochs", "2"))
    resumed = _lines(_run(broken, "--resume"))
    assert first[:2] == lines[:2]
    assert resumed == lines[2:]  # epoch 2 and the accuracy, as in the unbroken run


def test_evaluate_scores_every_sample_once():
    """Each rank's shard, with the all-reduce of a one-process group leaving its counts as they are:
    the shards of 3 ranks count 11 samples once each and add up to the exact accuracy."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import TensorDataset

    from ddp_lib.demos.plain_train import evaluate

    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(11, 2), torch.randint(0, 2, (11,)))
    model = nn.Linear(2, 2)
    exact = (model(dataset.tensors[0]).argmax(1) == dataset.tensors[1]).float().mean().item()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        sizes = [len(range(rank, 11, 3)) for rank in range(3)]
        accuracies = [evaluate(model, dataset, rank, 3, torch.device("cpu")) for rank in range(3)]
    finally:
        dist.destroy_process_group()
    assert sizes == [4, 4, 3]
    assert abs(sum(a * n for a, n in zip(accuracies, sizes)) / 11 - exact) < 1e-6
    assert model.training  # evaluate puts the model back in training mode
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:  # no device: the model's own, as in exercise 1's signature
        assert evaluate(model, dataset, 0, 3) == accuracies[0]
    finally:
        dist.destroy_process_group()


def test_evaluate_passes_exercise_1_s_checker_on_2_and_3_ranks():
    """The lesson calls plain_train's evaluate the answer to exercise 1: the checker runs it, with
    exercise 1's four arguments, on 2 and 3 real processes."""
    from ddp_lib.demos.plain_train import evaluate
    from ddp_lib.exercises.lesson09 import check_evaluate

    report = str(check_evaluate(evaluate))
    assert "PASS world_size 2" in report and "PASS world_size 3" in report and "FAIL" not in report, report


def test_evaluate_gives_every_rank_rank_0_s_batch_norm_buffers_first():
    """Batch norm's running statistics differ by rank after DDP training: evaluate broadcasts rank 0's, so
    that both ranks return the accuracy of rank 0's model, not a mix of the two models."""
    from plain_train_workers import evaluate_drifted_buffers

    from ddp_lib.launch import run_ranks

    ranks = run_ranks(evaluate_drifted_buffers, 2, show_output=False)
    assert abs(ranks[0]["mixed_accuracy"] - ranks[0]["rank0_accuracy"]) > 1e-6  # without the broadcast: a mix
    for r in ranks:
        assert r["buffers_are_rank0s"]
        assert abs(r["accuracy"] - r["rank0_accuracy"]) < 1e-6


@pytest.mark.parametrize("first, then", [(True, False), (False, True)])
def test_a_checkpoint_resumes_with_compile_turned_on_or_off(tmp_path, monkeypatch, capsys, first, then):
    """With COMPILE on, the checkpoint still holds the model's own keys (no "_orig_mod."), so a run
    saved compiled resumes uncompiled and back, and goes on as a run never stopped, in a one-process group."""
    import functools

    import torch
    import torch.distributed as dist

    from ddp_lib.demos import plain_train

    # aot_eager instead of inductor: the same tracing, no C++ compiler, seconds instead of minutes
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    cpu = torch.device("cpu")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for directory, compiled, resume, epochs in (("unbroken", False, False, 2), ("broken", first, False, 1),
                                                    ("broken", then, True, 2)):
            (tmp_path / directory).mkdir(exist_ok=True)
            monkeypatch.chdir(tmp_path / directory)
            monkeypatch.setattr(plain_train, "COMPILE", compiled)
            plain_train.train(0, 1, cpu, epochs, resume)
            if directory == "broken" and not resume:
                keys = list(torch.load("checkpoint.pt", weights_only=True)["model"])
    finally:
        dist.destroy_process_group()
        torch.compiler.reset()
    assert keys == ["0.weight", "0.bias", "2.weight", "2.bias"]  # the model's own, compiled or not
    losses = [float(line.split()[-1]) for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(losses) == 4  # unbroken: epochs 0 and 1; broken: epoch 0, then epoch 1 resumed
    assert abs(losses[0] - losses[2]) < 1e-4 and abs(losses[1] - losses[3]) < 1e-4
