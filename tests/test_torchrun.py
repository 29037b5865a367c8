"""Lesson 06: the training worker under real torchrun (subprocesses), on one and two local
"nodes", and restarted after an injected failure."""

from __future__ import annotations

import pytest
import torch

from ddp_lib.launch import spawn
from ddp_lib.torchrun import parse_results, run_nodes, run_torchrun, torchrun_command
from ddp_lib.workers.train import train

TRAIN = ["-m", "ddp_lib", "run", "train", "--epochs", "3", "--json"]


@pytest.fixture(scope="module")
def reference():
    """The 2-rank job through ddp_lib's own launcher: what torchrun must reproduce."""
    return spawn(train, 2, args=(3, 16, 0.1, 0), show_output=False)


def test_parse_results_orders_ranks_and_keeps_other_lines():
    results, lines = parse_results('{"rank": 1, "result": 11}\nepoch 1\n{"rank": 0, "result": 10}\n')
    assert results == [10, 11] and lines == ["epoch 1"]


def test_two_nodes_on_one_machine_give_the_one_node_result(reference):
    job = run_nodes(TRAIN, nnodes=2, nproc_per_node=1)
    assert job.returncode == 0, job.stderr[-2000:]
    assert [r["rank"] for r in job.results] == [0, 1]
    assert job.results[0]["losses"] == reference[0]["losses"]
    diff = (torch.tensor(job.results[1]["params"]) - torch.tensor(reference[1]["params"])).abs().max().item()
    assert diff < 1e-6


def test_restart_after_an_injected_failure_resumes_from_the_checkpoint(tmp_path, reference):
    program = TRAIN + ["--checkpoint-dir", str(tmp_path), "--resume", "--fail-at-epoch", "3"]
    # The shared rendezvous store keeps the first attempt's keys (pytorch/pytorch#135712): opt out.
    env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    job = run_torchrun(torchrun_command(program, nproc_per_node=2, max_restarts=1), env=env)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "RuntimeError: injected failure at epoch 3 on rank 1" in job.stderr  # the first attempt
    assert [r["rank"] for r in job.results] == [0, 1]
    assert [(r["attempt"], r["start_epoch"]) for r in job.results] == [(1, 2), (1, 2)]
    assert job.lines[-2:] == ["resumed from the checkpoint of epoch 2", job.lines[-1]]
    assert job.lines[-1].startswith("epoch  3/3 [####################] loss ")
    assert job.results[0]["losses"] == reference[0]["losses"]
    assert job.results[0]["params"] == reference[0]["params"]


def test_parse_results_separates_lines_glued_together():
    results, lines = parse_results('{"rank": 1, "result": [1]}epoch 2{"rank": 0, "result": [0]}\n\n')
    assert results == [[0], [1]] and lines == ["epoch 2"]
