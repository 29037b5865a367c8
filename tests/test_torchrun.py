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
    # Two attempts of four torch-importing ranks: minutes on a busy machine of two cores.
    job = run_torchrun(torchrun_command(program, nproc_per_node=2, max_restarts=1), env=env, timeout=300)
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


SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
failing FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_20:57:27
  host      : node7.example
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 10912)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 10912
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_20:56:56
  host      : node7.example
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 10913)
  error_file: /tmp/logs/b79fc338_v39tppnf/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/home/me/.venv/lib/python3.11/site-packages/torch/x.py", line 367, in wrapper
  RuntimeError: injected failure on rank 0
============================================================
"""


def test_failure_summary_keeps_what_to_read_and_hides_what_changes_every_run():
    from ddp_lib.torchrun import failure_summary

    text = failure_summary("log line before\n" + SUMMARY)
    assert text.startswith("====") and text.endswith("====") and "log line before" not in text
    for gone in ("2026-12-01", "node7", "10912", "/tmp/", "/home/"):
        assert gone not in text
    assert "exitcode  : -15 (pid: PID)  (SIGTERM)" in text and "received by PID PID" in text
    assert "error_file: LOG_DIR/.../attempt_0/0/error.json" in text
    assert 'File ".../site-packages/torch/x.py", line 367' in text
    assert failure_summary("no summary here") == ""


def test_run_nodes_refuses_a_count_per_node_that_does_not_match():
    with pytest.raises(ValueError, match="nproc_per_node has 3 counts for 2 nodes"):
        run_nodes(TRAIN, nnodes=2, nproc_per_node=[1, 1, 1])


def test_a_command_is_shown_without_what_changes_between_runs():
    from ddp_lib.torchrun import command_text

    cmd = torchrun_command(["-m", "x", "--checkpoint-dir", "/tmp/lesson06-abc"], nproc_per_node=1, nnodes=2,
                           rdzv_endpoint="127.0.0.1:4567")
    assert command_text(cmd) == ("torchrun --nproc-per-node=1 --max-restarts=0 --nnodes=2 --rdzv-backend=c10d "
                                 "--rdzv-endpoint=127.0.0.1:PORT --rdzv-id=ddp-lib -m x --checkpoint-dir DIR")
    static = torchrun_command(["-m", "x"], nproc_per_node=1, nnodes=2, node_rank=1, rdzv_endpoint="127.0.0.1:4567")
    assert "--master-port=PORT -m x" in command_text(static)


def test_a_shown_job_prints_its_command_as_it_starts_and_rank_0s_lines_as_they_come(capsys):
    job = run_torchrun(torchrun_command(["-m", "ddp_lib", "run", "train", "--epochs", "1", "--json"],
                                        nproc_per_node=1), show=True)
    assert job.returncode == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == ("starting: torchrun --nproc-per-node=1 --max-restarts=0 --standalone "
                        "-m ddp_lib run train --epochs 1 --json")
    assert shown[1:] == job.lines and shown[1].startswith("epoch  1/1 [")  # results are not printed
