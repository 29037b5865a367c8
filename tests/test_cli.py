"""python -m ddp_lib, as a user runs it: list, run, exit codes, and the same worker under torchrun."""

import json
import os
import subprocess
import sys

import pytest

from ddp_lib.workers import WORKERS


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_lib", *args], capture_output=True, text=True, timeout=timeout)


def test_list_names_every_worker_with_what_it_shows():
    out = cli("list")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(WORKERS)
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_run_json_prints_per_rank_results_in_rank_order_on_the_last_line():
    out = cli("run", "demo_basic", "--world-size", "2", "--seed", "3", "--json")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == ["[rank 0] rank 0 of 2 on cpu", "[rank 1] rank 1 of 2 on cpu"]
    results = json.loads(out.stdout.splitlines()[-1])
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["checksum"] == results[1]["checksum"]


@pytest.mark.parametrize("args, message", [
    (["run", "demo_basic", "--world-size", "0"], "world_size must be 1 or more, got 0"),
    (["run", "demo_basic", "--world-size", "-1"], "world_size must be 1 or more, got -1"),
    (["run", "demo_basic", "--world-size", "two"],
     "--world-size must be a whole number of processes (1 or more), got 'two'"),
    (["run", "demo_basic"], "--world-size is required"),
    (["run", "nope", "--world-size", "2"], "unknown worker 'nope'; accepted: "),
    (["run", "demo_basic", "--world-size", "2", "--backend", "carrier-pigeon"], "unknown backend 'carrier-pigeon'"),
    (["run", "demo_basic", "--world-size", "2", "--colour", "red"], "unrecognized arguments: --colour red"),
    (["fly"], "invalid choice: 'fly'"),
])
def test_bad_input_exits_2_with_one_line_and_no_traceback(args, message):
    out = cli(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ddp_lib: error: ") and message in out.stderr


def test_nccl_without_cuda_exits_2():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = cli("run", "demo_basic", "--world-size", "2", "--backend", "nccl")
    assert out.returncode == 2 and "needs CUDA GPUs" in out.stderr


def test_a_failing_worker_exits_1_naming_the_rank():
    out = cli("run", "raise_on_rank", "--world-size", "3", "--bad-rank", "2")
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == "ddp_lib: rank 2 raised ValueError: rank 2 was told to fail"


def test_a_hung_worker_exits_1_after_the_timeout():
    out = cli("run", "hang_on_rank", "--world-size", "2", "--timeout", "2")
    assert out.returncode == 1
    assert "did not finish within its 2 s deadline; rank 1 still running" in out.stderr


def test_the_same_worker_runs_under_torchrun():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "ddp_lib", "run", "demo_basic", "--json"],
        capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    results = sorted(map(json.loads, lines), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["result"]["checksum"] == results[1]["result"]["checksum"]
    # Same seed, same world size: the same numbers as through ddp_lib's own launcher.
    ours = json.loads(cli("run", "demo_basic", "--world-size", "2", "--json").stdout.splitlines()[-1])
    assert [r["result"] for r in results] == ours
