"""python -m ddp_lib, as a user runs it: list, run, exit codes, and the same worker under torchrun."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from test_launch import communicate_or_show_stacks

from conftest import pythonpath_with_tests, run_launcher
from ddp_lib.workers import WORKERS


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_lib", *args], capture_output=True, text=True, timeout=timeout)


def test_list_names_every_worker_with_what_it_shows(cli_in_process):
    out = cli_in_process("list")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(WORKERS)
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_run_json_prints_per_rank_results_in_rank_order_on_the_last_line(cli_with_ranks):
    out = cli_with_ranks("run", "demo_basic", "--world-size", "2", "--seed", "3", "--json")
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
    (["bench", "launch", "--repeats", "-1"], "argument --repeats: must be a whole number of at least 1, got '-1'"),
    (["bench", "launch", "--repeats", "0"], "argument --repeats: must be a whole number of at least 1, got '0'"),
    (["bench", "launch", "--rep", "2"], "unrecognized arguments: --rep 2"),
])
def test_bad_input_exits_2_with_one_line_and_no_traceback(args, message, cli_in_process):
    out = cli_in_process(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ddp_lib: error: ") and message in out.stderr


def test_a_real_process_exits_2_with_one_line_and_no_traceback():
    # The refusals above run main() in this process; here the command as a user runs it.
    out = cli("run", "demo_basic", "--world-size", "0")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == "ddp_lib: error: world_size must be 1 or more, got 0\n"


def test_nccl_without_cuda_exits_2(cli_in_process):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = cli_in_process("run", "demo_basic", "--world-size", "2", "--backend", "nccl")
    assert out.returncode == 2 and "needs CUDA GPUs" in out.stderr


def test_a_failing_worker_exits_1_naming_the_rank(cli_with_ranks):
    out = cli_with_ranks("run", "raise_on_rank", "--world-size", "3", "--bad-rank", "2")
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == "ddp_lib: rank 2 raised ValueError: rank 2 was told to fail"


def test_a_hung_worker_exits_1_after_the_timeout(cli_with_ranks):
    out = cli_with_ranks("run", "hang_on_rank", "--world-size", "2", "--timeout", "2")
    assert out.returncode == 1
    assert "did not finish within its 2 s deadline; rank 1 still running" in out.stderr


def test_the_same_worker_runs_under_torchrun(cli_with_ranks):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    out = run_launcher(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "ddp_lib", "run", "demo_basic", "--json"],
        timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    results = sorted(map(json.loads, lines), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["result"]["checksum"] == results[1]["result"]["checksum"]
    # Same seed, same world size: the same numbers as through ddp_lib's own launcher.
    ours = json.loads(cli_with_ranks("run", "demo_basic", "--world-size", "2", "--json").stdout.splitlines()[-1])
    assert [r["result"] for r in results] == ours


def one_line_refusal(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ddp_lib: error: "), out.stderr[-2000:]
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("env, message", [
    ({"RANK": "0"}, "ddp_lib: error: RANK set in the environment but not LOCAL_RANK, WORLD_SIZE"),
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456"},
     "ddp_lib: error: RANK, WORLD_SIZE set in the environment but not LOCAL_RANK"),
])
def test_a_rank_variable_left_in_the_environment_does_not_take_over_the_command_line(env, message, cli_in_process):
    # Kubeflow-style containers set RANK (and more); before, this ended in a KeyError traceback
    # or a rank listening on every interface, waiting for peers that never come.
    out = cli_in_process("run", "hello", "--world-size", "2", env=env)
    one_line_refusal(out, message)
    assert "unset" in out.stderr and "or start it with torchrun" in out.stderr


def test_world_size_contradicting_torchrun_stops_every_rank_in_one_line():
    from ddp_lib.torchrun import run_torchrun, torchrun_command

    job = run_torchrun(torchrun_command(["-m", "ddp_lib", "run", "hello", "--world-size", "3"], nproc_per_node=2),
                       timeout=120)
    assert job.returncode != 0 and job.results == []
    # torchrun stops the other rank as soon as one exits, so it may not get to print its line.
    assert job.stderr.count("ddp_lib: error: --world-size 3 contradicts WORLD_SIZE=2 set by torchrun") >= 1
    assert "Traceback" not in job.stderr.split("ddp_lib: error:")[0]


def test_the_same_world_size_as_torchrun_is_accepted():
    from ddp_lib.torchrun import run_torchrun, torchrun_command

    job = run_torchrun(torchrun_command(["-m", "ddp_lib", "run", "hello", "--world-size", "2", "--json"],
                                        nproc_per_node=2), timeout=120)
    assert job.returncode == 0, job.stderr[-2000:]
    assert len(job.results) == 2


def test_a_world_size_beyond_one_machine_is_refused_before_anything_starts(cli_in_process):
    out = cli_in_process("run", "hello", "--world-size", "1000000000")
    one_line_refusal(out, "world_size 1000000000 is more processes than one machine should run (at most 64")
    assert "use several nodes with torchrun" in out.stderr and "DDP_LIB_MAX_WORLD_SIZE" in out.stderr


def test_the_world_size_limit_can_be_raised(cli_in_process):
    out = cli_in_process("run", "hello", "--world-size", "65",
                         env={"DDP_LIB_MAX_WORLD_SIZE": "65", "OMP_NUM_THREADS": "x"})
    one_line_refusal(out, "OMP_NUM_THREADS must be")  # past the world size check: refused by the next one


@pytest.mark.parametrize("timeout", ["inf", "1e300", "0", "-5", "nan", "soon"])
def test_timeouts_that_would_fail_late_or_change_silently_are_refused(timeout, cli_in_process):
    out = cli_in_process("run", "hello", "--world-size", "2", "--timeout", timeout)
    one_line_refusal(out, f"--timeout must be a number of seconds above 0 and at most 604800 (a week), "
                          f"or 'none' for no deadline, got '{timeout}'")


def test_timeout_none_means_no_deadline(cli_with_ranks):
    out = cli_with_ranks("run", "hello", "--world-size", "2", "--timeout", "none")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name, value", [("OMP_NUM_THREADS", "0"), ("OMP_NUM_THREADS", "abc"),
                                         ("OMP_NUM_THREADS", "4,2"), ("TORCH_DISTRIBUTED_DEBUG", "bogus")])
def test_bad_environment_variables_are_refused_before_any_process_starts(name, value, cli_in_process):
    out = cli_in_process("run", "hello", "--world-size", "2", env={name: value})
    one_line_refusal(out, f"ddp_lib: error: {name} must be")
    assert f"got {value!r}" in out.stderr


def test_json_stays_json_when_the_loss_diverges(cli_with_ranks):
    out = cli_with_ranks("run", "cli_workers:diverged", "--world-size", "2", "--json")
    assert out.returncode == 0, out.stderr

    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    results = json.loads(out.stdout.splitlines()[-1], parse_constant=refuse)
    assert results == [{"losses": [1.0, None, None], "rank": 0}, {"losses": [1.0, None, None], "rank": 1}]
    assert ("ddp_lib: 4 number(s) in the results are not finite "
            "(rank 0 ['losses'][1] = inf, rank 0 ['losses'][2] = nan, rank 1 ['losses'][1] = inf ...); "
            "written as null in the JSON") in out.stderr.splitlines()


def _processes_in_group(pgid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts processes through /proc")
def _stop_sleeping_ranks(pid_dir, send, tmpdir: str | None = None) -> tuple[subprocess.Popen, str, list[int]]:
    """Run ``python -m ddp_lib run`` with two ranks that sleep, in a process group of its own (as a
    terminal's foreground job), until both have started; then ``send(proc)``. Returns the command's
    process, its stderr and its ranks' process ids; nothing is left running if it did not end."""
    import signal
    import time

    from ddp_lib.torchrun import clean_env

    env = clean_env({"PYTHONPATH": pythonpath_with_tests(), **({"TMPDIR": tmpdir} if tmpdir else {})})
    argv = ["-X", "faulthandler", "-m", "ddp_lib", "run", "cli_workers:sleep_forever", "--world-size", "2",
            "--pid-dir", str(pid_dir)]
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while len(list(pid_dir.glob("rank*.pid"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.1)
        ranks = [int(p.read_text()) for p in pid_dir.glob("rank*.pid")]
        send(proc)
        _, err = communicate_or_show_stacks(proc, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, err, ranks


def test_ctrl_c_stops_every_rank_and_exits_130_in_one_line(tmp_path):
    import signal
    import time

    def ctrl_c(proc: subprocess.Popen) -> None:
        assert len(_processes_in_group(proc.pid)) >= 3  # the command, its ranks (and the forkserver)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C sends SIGINT to the whole foreground group

    proc, err, ranks = _stop_sleeping_ranks(tmp_path, ctrl_c)
    assert proc.returncode == 130
    assert err == "ddp_lib: interrupted; every rank was stopped\n"
    deadline = time.monotonic() + 10
    while _processes_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_in_group(proc.pid) == []
    assert not [pid for pid in ranks if os.path.exists(f"/proc/{pid}")]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_stops_every_rank_in_one_line_and_leaves_no_temporary_folder(sig, tmp_path):
    import signal

    # A short TMPDIR of its own: the forkserver's socket lives there, and a Unix socket's path may
    # not exceed about 100 bytes (pytest's own temporary paths grow with its run counter).
    tmp = tempfile.mkdtemp(prefix="ddp-t-")
    try:
        proc, err, ranks = _stop_sleeping_ranks(tmp_path, lambda proc: proc.send_signal(getattr(signal, sig)), tmp)
        assert proc.returncode == 128 + getattr(signal, sig)
        assert err == f"ddp_lib: stopped by {sig}; every rank was stopped\n"
        assert not [pid for pid in ranks if os.path.exists(f"/proc/{pid}")]
        assert launch_folders(tmp) == []  # neither multiprocessing's pymp-* nor the launcher's own
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def launch_folders(tmp) -> list[str]:
    """The folders a launch makes in the temporary directory ``tmp`` (multiprocessing's ``pymp-*``,
    the launcher's ``ddp_lib-*``): not torch's caches (``torchinductor_*``)."""
    return sorted(name for name in os.listdir(tmp) if name.startswith(("pymp-", "ddp_lib-")))
