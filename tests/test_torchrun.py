"""Lesson 06: the training worker under real torchrun (subprocesses), on one and two local
"nodes", and restarted after an injected failure; each rank's folder under torchrun's --log-dir
read back (a real job, and hand-made folders for the corner cases)."""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import pytest
import torch

from ddp_lib.launch import spawn
from ddp_lib.rank_files import AGENT_ERROR_FILE, NO_FILES, agent_error, read_run
from ddp_lib.torchrun import run_nodes, run_torchrun, torchrun_command
from ddp_lib.workers.train import train

TRAIN = ["-m", "ddp_lib", "run", "train", "--epochs", "3", "--json"]


@pytest.fixture(scope="module")
def reference():
    """The 2-rank job through ddp_lib's own launcher: what torchrun must reproduce."""
    return spawn(train, 2, args=(3, 16, 0.1, 0), show_output=False)


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


FAILING = """
import os
import time


def work(rank, world_size):
    print(f"rank {rank} working", flush=True)
    if rank == 1:
        raise ValueError("rank 1 read a corrupt batch")
    time.sleep(60)  # torchrun stops this rank (SIGTERM) once rank 1 has failed
"""


def test_a_real_jobs_folders_give_each_ranks_output_and_the_failure(tmp_path):
    (tmp_path / "failing.py").write_text(FAILING)
    logs = tmp_path / "logs"
    job = run_torchrun(torchrun_command(["-m", "ddp_lib.torchrun", "failing:work"], nproc_per_node=2,
                                        options=(f"--log-dir={logs}",)), env={"PYTHONPATH": str(tmp_path)})
    assert job.returncode == 1 and job.results == []
    (run,) = [p.name for p in logs.iterdir() if p.is_dir()]  # one torchrun: one run folder, "<run id>_<random>"
    files = sorted(str(p.relative_to(logs / run)) for p in (logs / run).rglob("*") if p.is_file())
    assert files == ["attempt_0/0/stderr.log", "attempt_0/0/stdout.log",
                     "attempt_0/1/error.json", "attempt_0/1/stderr.log", "attempt_0/1/stdout.log"]
    assert sorted(job.lines) == ["rank 0 working", "rank 1 working"]
    # Rank 0 was stopped by a signal and left no error: rank 1 is blamed, as the launcher would.
    assert str(job.error) == "rank 1 raised ValueError: rank 1 read a corrupt batch"
    assert job.error.failures == {1: "ValueError: rank 1 read a corrupt batch"}
    assert 'raise ValueError("rank 1 read a corrupt batch")' in job.error.worker_traceback
    assert job.agent_error == "ValueError: rank 1 read a corrupt batch"  # @record copies the root cause


def _rank_folder(root: Path, local_rank: int, attempt: int = 0, run: str = "job_x1", *, result=None, error: str = "",
                 rank: int | None = None) -> None:
    folder = root / run / f"attempt_{attempt}" / str(local_rank)
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text(f"local rank {local_rank}, attempt {attempt}\n")
    if error:
        (folder / "error.json").write_text(json.dumps(
            {"message": {"message": error, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "0"}}}))
    if result is not None:
        (folder / "result.json").write_text(json.dumps({"rank": local_rank if rank is None else rank,
                                                        "result": result}))


def test_a_rank_that_failed_as_a_peers_echo_is_not_blamed(tmp_path):
    _rank_folder(tmp_path, 0, error="RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.2]:4211")
    _rank_folder(tmp_path, 1, error="ValueError: bad batch")
    _rank_folder(tmp_path, 2)  # killed by a signal: no file but its output
    error = read_run([tmp_path]).error
    assert (error.rank, error.exc_type, error.message) == (1, "ValueError", "bad batch")
    assert sorted(error.failures) == [0, 1]  # the silent rank is not a failure when others raised
    assert error.outputs[2] == ("local rank 2, attempt 0\n", "")


def test_ranks_killed_without_files_are_named_when_no_rank_raised(tmp_path):
    _rank_folder(tmp_path, 0, result=10)
    _rank_folder(tmp_path, 1)
    run = read_run([tmp_path])
    assert run.results == [10] and str(run.error) == f"rank 1 {NO_FILES}"


def test_only_the_last_attempt_counts(tmp_path):
    for local_rank in (0, 1):
        _rank_folder(tmp_path, local_rank, attempt=0, error=f"RuntimeError: failure on {local_rank}")
        _rank_folder(tmp_path, local_rank, attempt=1, result=local_rank * 10)
    run = read_run([tmp_path])
    assert run.error is None and run.results == [0, 10]
    assert run.lines == ["local rank 0, attempt 1", "local rank 1, attempt 1"]
    assert read_run([tmp_path], attempt=0).error.rank == 0


def test_a_torchruns_own_error_is_the_first_of_its_chain(tmp_path):
    try:
        try:
            raise ConnectionError("The client socket has timed out after 10000ms")
        except ConnectionError as exc:
            raise RuntimeError("The connection to the C10d store has failed. See inner exception for details.") from exc
    except RuntimeError:
        callstack = traceback.format_exc()
    record = {"message": {"message": "RuntimeError: See inner exception", "extraInfo": {"py_callstack": callstack}}}
    (tmp_path / AGENT_ERROR_FILE).write_text(json.dumps(record))
    assert agent_error(tmp_path) == "ConnectionError: The client socket has timed out after 10000ms"
    (tmp_path / AGENT_ERROR_FILE).write_text(json.dumps({"message": {"message": "RendezvousTimeoutError: "}}))
    assert agent_error(tmp_path) == "RendezvousTimeoutError"
    assert agent_error(tmp_path / "none") == ""


def test_nodes_get_their_global_ranks_from_results_else_from_the_nodes_before(tmp_path):
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    _rank_folder(node1, 0, result="b", rank=0)  # c10d made this torchrun node 0
    _rank_folder(node0, 0, error="ValueError: x")
    _rank_folder(node0, 1, error="ValueError: x")
    run = read_run([node0, node1])
    assert [r.rank for r in run.ranks] == [0, 1, 2] and run.results == ["b"]
    assert sorted(run.error.failures) == [1, 2]


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
    assert shown[0] == ("starting: torchrun --nproc-per-node=1 --max-restarts=0 --standalone --log-dir=DIR "
                        "--redirects=3 --tee=2 -m ddp_lib run train --epochs 1 --json")
    assert shown[1:] == job.lines and shown[1].startswith("epoch  1/1 [")  # results are not printed
