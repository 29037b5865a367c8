"""Lesson 10's plain FSDP2 script runs under torchrun on 2 CPU ranks, logs one global loss per
epoch from rank 0, and leaves a DCP checkpoint directory."""

import sys
from pathlib import Path

from conftest import run_launcher

SCRIPT = Path(__file__).resolve().parent.parent / "ddp_lib" / "demos" / "plain_fsdp2.py"


def test_plain_fsdp2_runs_under_torchrun(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    done = run_launcher([str(torchrun), "--nproc-per-node", "2", str(SCRIPT)], cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 0", "epoch 1", "epoch 2"]
    assert (tmp_path / "fsdp2_checkpoint" / ".metadata").exists()


def test_plain_fsdp2_seeds_each_rank_apart_after_sharding():
    """Like lesson 09's plain_train.py: one seed for the data and weights, then a seed per rank for
    dropout or augmentation, set once the model is sharded."""
    lines = [line.strip() for line in SCRIPT.read_text().splitlines()]
    root = next(i for i, line in enumerate(lines) if line.startswith("fully_shard(model,"))
    first_seed = next(i for i, line in enumerate(lines) if line.startswith("torch.manual_seed(SEED)"))
    rank_seed = next(i for i, line in enumerate(lines) if line.startswith("torch.manual_seed(SEED + rank)"))
    assert first_seed < root < rank_seed
