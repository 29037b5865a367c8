"""ddp_lib.demos.torchrun_batch (lesson 06): its jobs, run for real, and its reading of a restart log."""

import pytest

from ddp_lib.demos import torchrun_batch

RESTART_LOG = """attempt 0: starting at epoch 0
epoch 0: last loss 0.5
epoch 1: last loss 0.4
[rank1]: RuntimeError: rank 1 fails in epoch 2
[rank0]: RuntimeError: [/src/gloo/pair.cc:1] Read error [127.0.0.1]:4242: Connection reset by peer
attempt 1: starting at epoch 2
epoch 2: last loss 0.3
epoch 3: last loss 0.2
epoch 4: last loss 0.1
torchrun's exit code: 0
"""
FIRST_LOG = "".join(line + "\n" for line in RESTART_LOG.splitlines() if line.startswith("epoch"))


def test_restart_report_reads_the_verdicts():
    report = torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG)
    assert report["exit code"] == 0 and report["attempt 1 trained to the last epoch"]
    assert report["rank 1's error"] == "RuntimeError: rank 1 fails in epoch 2"
    lost = "[rank0]: RuntimeError: Read error [127.0.0.1]:PORT: Connection reset by peer"
    assert report["rank 0's lost connection"] == lost
    assert report["same losses as without the failure"]
    other = torchrun_batch.restart_report(RESTART_LOG, "epoch 0: last loss 0.9\n")
    assert not other["same losses as without the failure"]


def test_the_lesson_jobs_give_each_section_its_verdict():
    batch = torchrun_batch.run_lesson_jobs()
    assert list(batch.jobs) == list(torchrun_batch.JOBS)
    assert sum(len(commands) for commands in batch.commands.values()) == 9
    assert batch["log_dir"].returncode == batch["local_addr"].returncode == 0
    assert {r["ids"]["MASTER_ADDR"] for r in batch["local_addr"].results} == {"127.0.0.1"}
    assert batch["taken_port"].returncode == 1 and "EADDRINUSE" in batch["taken_port"].agent_error
    assert [job.returncode for job in batch.node_jobs["c10d"] + batch.node_jobs["static"]] == [0, 0, 0, 0]
    assert len(batch["static"].results) == 3
    assert batch["wrong_id"].agent_error.startswith("RendezvousTimeoutError") and not batch["wrong_id"].results
    assert batch["failing"].returncode == 1 and any(batch.log_dir("failing").rglob("error.json"))
    with pytest.raises(KeyError, match="no job named 'nope'"):
        batch["nope"]
