"""Lesson 06: the training worker under real torchrun (subprocesses), on one and two local
"nodes", and restarted after an injected failure; each rank's folder under torchrun's --log-dir
read back (a real job, and hand-made folders for the corner cases)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import traceback
import uuid
from pathlib import Path

import pytest
import torch

from conftest import pythonpath_with_tests, recorded_pids, run_launcher, wait_until_gone
from ddp_lib.errors import LaunchInputError, LaunchTimeout
from ddp_lib.launch import run_ranks
from ddp_lib.launch._record import (
    AGENT_ERROR_FILE,
    NO_FILES,
    RESULT_FILE,
    UNKNOWN,
    agent_error,
    load_result,
    read_run,
    runs_in,
)
from ddp_lib.torchrun import job_exit_code, read_job, run_nodes, run_torchrun, torchrun_command, with_log_dir
from ddp_lib.workers.train import train

TRAIN = ["-m", "ddp_lib", "run", "train", "--epochs", "3", "--json"]


@pytest.fixture(scope="module")
def reference():
    """The 2-rank job through ddp_lib's own launcher: what torchrun must reproduce."""
    return run_ranks(train, 2, args=(3, 16, 0.1, 0), show_output=False)


def test_two_nodes_on_one_machine_give_the_one_node_result(reference):
    job = run_nodes(TRAIN, nnodes=2, nproc_per_node=1)
    assert job.returncode == 0, job.stderr[-2000:]
    assert [r["rank"] for r in job.results] == [0, 1]
    assert job.results[0]["losses"] == reference[0]["losses"]
    diff = (torch.tensor(job.results[1]["params"]) - torch.tensor(reference[1]["params"])).abs().max().item()
    assert diff < 1e-6


def test_nodes_given_one_log_dir_are_each_read_once(tmp_path):
    program = ["-m", "ddp_lib.torchrun", "ddp_lib.workers.torchrun_env:launch_vars"]
    job = run_nodes(program, nnodes=2, nproc_per_node=[1, 2], static=True, options=(f"--log-dir={tmp_path}",))
    assert job.returncode == 0, job.stderr[-2000:]
    assert [r["rank"] for r in job.results] == [0, 1, 2]


def test_c10d_makes_the_agent_with_the_lower_process_id_node_0():
    # Both "nodes" share this host name, so c10d orders them by their agents' process ids (lesson 06).
    program = ["-m", "ddp_lib.torchrun", "ddp_lib.workers.torchrun_env:launch_vars"]
    job = run_nodes(program, nnodes=2, nproc_per_node=1)
    assert job.returncode == 0, job.stderr[-2000:]
    by_pid = sorted(job.results, key=lambda r: r["ids"]["agent_pid"])
    assert by_pid[0]["ids"]["agent_pid"] < by_pid[1]["ids"]["agent_pid"]
    assert [r["env"]["GROUP_RANK"] for r in by_pid] == ["0", "1"]


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
import time
from pathlib import Path


def work(rank, world_size):
    print(f"rank {rank} working", flush=True)
    working = Path(__file__).with_name("rank0_working")
    if rank == 0:
        working.touch()
        time.sleep(60)  # torchrun stops this rank (SIGTERM) once rank 1 has failed
    while not working.exists():  # on a busy machine rank 1 could otherwise fail before rank 0 has begun
        time.sleep(0.05)
    raise ValueError("rank 1 read a corrupt batch")
"""


def test_a_real_jobs_folders_give_each_ranks_output_and_the_failure(tmp_path):
    (tmp_path / "failing.py").write_text(FAILING)
    logs = tmp_path / "logs"
    # An earlier run in the same --log-dir (torch reuses it): neither its ranks nor its error are this job's.
    _rank_folder(logs, 0, run="earlier_abc", result="old", rank=0)
    (logs / AGENT_ERROR_FILE).write_text(json.dumps({"message": {"message": "RendezvousTimeoutError: old"}}))
    job = run_torchrun(torchrun_command(["-m", "ddp_lib.torchrun", "failing:work"], nproc_per_node=2,
                                        options=(f"--log-dir={logs}",)), env={"PYTHONPATH": str(tmp_path)})
    assert job.returncode == 1 and job.results == []
    (run,) = [p.name for p in runs_in(logs) if p.name != "earlier_abc"]  # one torchrun: one run folder
    files = sorted(str(p.relative_to(logs / run)) for p in (logs / run).rglob("*") if p.is_file())
    assert files == ["attempt_0/0/rank.json", "attempt_0/0/stderr.log", "attempt_0/0/stdout.log",
                     "attempt_0/1/error.json", "attempt_0/1/rank.json", "attempt_0/1/stderr.log",
                     "attempt_0/1/stdout.log"]
    assert sorted(job.lines) == ["rank 0 working", "rank 1 working"]
    # Rank 0 was stopped by a signal and left no error: rank 1 is blamed, as the launcher would.
    assert str(job.error) == "rank 1 raised ValueError: rank 1 read a corrupt batch"
    assert job.error.failures == {1: "ValueError: rank 1 read a corrupt batch"}
    assert 'raise ValueError("rank 1 read a corrupt batch")' in job.error.worker_traceback
    assert job.agent_error == "ValueError: rank 1 read a corrupt batch"  # @record copies the root cause
    with pytest.raises(ValueError, match="holds 2 runs"):  # which run is this job's: not guessed
        read_run([logs])


DEADLINE_S = 25
SLEEPING = """
import time
from pathlib import Path


def work(rank, world_size):
    Path(__file__).with_name(f"started{rank}").touch()
    time.sleep(120)
"""


def _processes_running(marker: str) -> int:
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            count += marker in cmdline.read_bytes().decode(errors="replace")
        except OSError:
            pass
    return count


def test_no_rank_outlives_a_job_stopped_at_its_deadline(tmp_path):
    # Long enough for torchrun and both ranks to start on a loaded machine (12 s was not, once).
    name = f"sleeping_{uuid.uuid4().hex[:8]}"  # only this test's ranks have it in their command line
    (tmp_path / f"{name}.py").write_text(SLEEPING)
    with pytest.raises(LaunchTimeout) as caught:
        run_torchrun(torchrun_command(["-m", "ddp_lib.torchrun", f"{name}:work"], nproc_per_node=2),
                     env={"PYTHONPATH": str(tmp_path)}, timeout=DEADLINE_S)
    assert sorted(p.name for p in tmp_path.glob("started*")) == ["started0", "started1"]  # they did run
    assert _processes_running(f"{name}:work") == 0
    # Where each rank was, as the launcher's own timeout says it.
    assert str(caught.value) == (f"the job did not finish within its {DEADLINE_S} s deadline; "
                                 "ranks 0, 1 still running were stopped")
    for rank in (0, 1):
        assert f"{name}.py\", line 8 in work" in caught.value.stacks[rank], caught.value.stacks


@pytest.mark.parametrize("cmd, timeout, message", [
    ("torchrun --nproc-per-node 2 -m ddp_lib run hello", 60, "a command must be a list of strings"),
    (["torchrun", 2], 60, "a command must be a list of strings"),
    (["python", "-m", "torch.distributed.run", "x.py"], -1, "timeout must be a number of seconds above 0"),
    (["python", "-m", "torch.distributed.run", "x.py"], float("nan"), "timeout must be a number of seconds above 0"),
])
def test_run_torchrun_refuses_bad_input_in_one_line_before_starting(cmd, timeout, message):
    with pytest.raises(LaunchInputError, match=f"^{message}") as caught:
        run_torchrun(cmd, timeout=timeout)
    assert "\n" not in str(caught.value)


def test_timeout_under_torchrun_ends_a_hung_rank_and_says_where_each_rank_was():
    cmd = torchrun_command(["-m", "ddp_lib", "run", "cli_workers:sleep_forever", "--timeout", "3"])
    job = run_torchrun(cmd, env={"PYTHONPATH": pythonpath_with_tests()}, timeout=60)
    assert job.returncode != 0
    assert "raised LaunchTimeout: the job did not finish within its 3 s deadline" in str(job.error)
    # The rank that reached its deadline first wrote its stack; torchrun's SIGTERM made the other write its own.
    for rank in (0, 1):
        assert "in sleep_forever" in job.error.outputs[rank][1], job.error.outputs


def _rank_folder(root: Path, local_rank: int, attempt: int = 0, run: str = "job_x1", *, result=None, error: str = "",
                 rank: int | None = None, place: int | None = None) -> None:
    """A rank's folder as torchrun and ddp_lib leave it; ``place``: the global rank in its rank.json."""
    folder = root / run / f"attempt_{attempt}" / str(local_rank)
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text(f"local rank {local_rank}, attempt {attempt}\n")
    if place is not None:
        (folder / "rank.json").write_text(json.dumps({"rank": place}))
    if error:
        (folder / "error.json").write_text(json.dumps(
            {"message": {"message": error, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "0"}}}))
    if result is not None:
        (folder / "result.json").write_text(json.dumps({"rank": local_rank if rank is None else rank,
                                                        "result": result}))


def test_a_rank_that_failed_as_a_peers_echo_is_not_blamed(tmp_path):
    # As torch's @record writes it: only its type, a Dist*Error, says it may be a peer's echo.
    _rank_folder(tmp_path, 0, error="DistBackendError: [pair.cc:534] Connection closed by peer [10.0.0.2]:4211")
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


def test_each_rank_is_read_back_as_the_global_rank_it_wrote_not_by_folder_order(tmp_path):
    # Two nodes of one job in one --log-dir (as under SLURM): c10d made the torchrun whose run folder
    # sorts first node 1 (global rank 2); it failed before any result.
    _rank_folder(tmp_path, 0, run="123_aaa", place=2, error="ValueError: bad batch on node1")
    _rank_folder(tmp_path, 0, run="123_zzz", place=0, result="r0")
    _rank_folder(tmp_path, 1, run="123_zzz", result="r1")  # wrote no rank.json: follows its node's rank 0
    run = read_run(runs_in(tmp_path))
    where = [(r.rank, r.folder.parent.parent.name) for r in run.ranks]
    assert where == [(0, "123_zzz"), (1, "123_zzz"), (2, "123_aaa")]
    assert str(run.error) == "rank 2 raised ValueError: bad batch on node1"


def test_a_node_whose_ranks_wrote_nothing_has_unknown_ranks(tmp_path):
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    _rank_folder(node1, 0, place=0, result="b")  # c10d made this torchrun node 0
    _rank_folder(node0, 0)
    _rank_folder(node0, 1)
    run = read_run([node0, node1])
    assert [r.rank for r in run.ranks] == [0, UNKNOWN, UNKNOWN] and run.results == ["b"]
    assert [r.rank for r in read_run([node0]).ranks] == [0, 1]  # one node: its local ranks are the ranks


def test_an_attempt_that_a_node_does_not_have_is_refused(tmp_path):
    _rank_folder(tmp_path / "node0", 0, attempt=0, place=0, error="RuntimeError: x")
    _rank_folder(tmp_path / "node1", 0, attempt=1, place=1, result=1)  # this node restarted; node 0 did not
    with pytest.raises(ValueError, match=r"node0/job_x1: no attempt_1 \(attempts are counted per node"):
        read_run([tmp_path / "node0", tmp_path / "node1"], attempt=1)


def test_a_rank_killed_without_files_is_blamed_when_every_error_is_an_echo(tmp_path):
    echo = "DistBackendError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:4211"
    _rank_folder(tmp_path, 0, place=0, error=echo)
    _rank_folder(tmp_path, 1, place=1)  # killed by the out-of-memory killer: no error file
    _rank_folder(tmp_path, 2, place=2, error=echo.replace("closed", "reset"))
    error = read_run([tmp_path]).error
    assert str(error) == f"rank 1 {NO_FILES}" and sorted(error.failures) == [0, 1, 2]


def test_a_job_that_exits_0_has_no_failure_even_without_results(tmp_path):
    _rank_folder(tmp_path, 0, place=0)  # a program that returns nothing to read
    assert read_job(0, runs_in(tmp_path), [str(tmp_path)]).error is None
    assert read_job(1, runs_in(tmp_path), [str(tmp_path)]).error.rank == 0


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # @record in pytest's captured stderr
def test_a_rank_run_by_the_command_line_writes_its_result_without_json(tmp_path, monkeypatch, capsys):
    from ddp_lib.cli import _run_this_rank

    folder = tmp_path / "job_x1" / "attempt_0" / "0"
    folder.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(folder / "error.json"))
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "GROUP_RANK": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert _run_this_rank(lambda rank, world_size: rank * 10, {}, as_json=False) == 0
    assert json.loads((folder / "rank.json").read_text()) == {"rank": 1, "group_rank": 1, "local_rank": 0,
                                                              "world_size": 2, "local_world_size": -1,
                                                              "pid": os.getpid()}
    written = json.loads((folder / RESULT_FILE).read_text())
    assert load_result(base64.b64decode(written.pop("pickle"))) == 10 and written == {"rank": 1, "result": 10}
    assert capsys.readouterr().out == "rank 1 returned 10\n"


def test_a_failed_job_is_reported_by_the_node_that_failed_not_by_the_signal_that_stopped_its_peer():
    assert job_exit_code([1, -15]) == 1 and job_exit_code([-15, 2]) == 2
    assert job_exit_code([0, -9]) == -9 and job_exit_code([0, 0]) == 0


def test_options_are_added_before_the_program_and_read_in_either_spelling():
    head = ["python", "-m", "torch.distributed.run"]
    cmd = head + ["--nproc-per-node", "2", "--log-dir", "/tmp/mine", "-r", "1", "-m", "prog", "--tee", "x"]
    placed, log_dir = with_log_dir(cmd, "/tmp/T")
    assert log_dir == "/tmp/mine"  # the command's own; its program's --tee is the program's
    assert placed == head + ["--tee=2"] + cmd[3:]
    placed, log_dir = with_log_dir(head + ["--standalone", "prog.py", "--log-dir=/x"], "/tmp/T")
    assert log_dir == "/tmp/T" and placed[3:6] == ["--log-dir=/tmp/T", "--redirects=3", "--tee=2"]
    placed, _ = with_log_dir(head + ["-t", "3", "-m", "x"], "/tmp/T")  # --tee writes the files too
    assert placed == head + ["--log-dir=/tmp/T", "-t", "3", "-m", "x"]


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
    spaced = ["python", "-m", "torch.distributed.run", "--master-port", "29511", "--rdzv-endpoint", "h:29400",
              "--log-dir", "/tmp/lesson06-x", "-m", "x"]
    assert command_text(spaced) == "torchrun --master-port PORT --rdzv-endpoint h:PORT --log-dir DIR -m x"


def _rank_file_followed_once(log_dir, text: str):
    """A rank folder of ``log_dir`` whose stdout.log holds ``text``, and a follower that has printed it."""
    from ddp_lib.launch._output import FollowedFiles

    folder = log_dir / "job_x1" / "attempt_0" / "0"
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text(text)
    follow = FollowedFiles(lambda: sorted(log_dir.glob("*/attempt_*/*/stdout.log")))
    follow.poll()
    return folder, follow


def test_a_followed_rank_file_made_again_is_printed_again(tmp_path, capsys):
    folder, follow = _rank_file_followed_once(tmp_path, "round one, a longer line\n")
    (folder / "stdout.log").unlink()  # a restart that spends nothing makes attempt_0 again
    (folder / "stdout.log").write_text("round two\n")
    follow.poll()
    assert capsys.readouterr().out == "round one, a longer line\nround two\n"


def test_a_shown_job_prints_its_command_as_it_starts_and_rank_0s_lines_as_they_come(capsys):
    job = run_torchrun(torchrun_command(["-m", "ddp_lib", "run", "train", "--epochs", "1", "--json"],
                                        nproc_per_node=1), show=True)
    assert job.returncode == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == ("starting: torchrun --log-dir=DIR --redirects=3 --tee=2 --nproc-per-node=1 "
                        "--max-restarts=0 --standalone -m ddp_lib run train --epochs 1 --json")
    assert shown[1:] == job.lines and shown[1].startswith("epoch  1/1 [")  # results are not printed


def test_a_rank_folder_made_again_with_more_than_was_read_is_printed_whole(tmp_path, capsys):
    # As torch does on a restart that spends no restart count: the attempt folder is removed and made
    # again. The filesystem may give the new file the old one's inode; it must still be read from its start.
    import shutil

    folder, follow = _rank_file_followed_once(tmp_path, "round one\n")
    shutil.rmtree(folder.parent)
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text("round two, line A\nround two, line B\n")
    follow.poll(final=True)
    assert capsys.readouterr().out == "round one\nround two, line A\nround two, line B\n"


def test_ctrl_c_during_run_torchrun_stops_torchrun_and_its_ranks_even_if_pressed_again(tmp_path):
    # run_torchrun in a script, as lesson 06 runs it in a kernel: two presses, the second while
    # torchrun is being stopped, and nothing may outlive the call.
    import os
    import signal
    import sys
    import textwrap
    import time

    from test_launch import communicate_or_show_stacks

    from conftest import pythonpath_with_tests, wait_until_gone
    from ddp_lib.launch._processes import descendants

    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = textwrap.dedent(f"""
        from ddp_lib.torchrun import run_torchrun, torchrun_command
        run_torchrun(torchrun_command(["-m", "ddp_lib", "run", "cli_workers:sleep_forever",
                                       "--pid-dir", {str(pid_dir)!r}], nproc_per_node=2), timeout=300)
    """)
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": pythonpath_with_tests()})
    deadline = time.monotonic() + 120
    while len(list(pid_dir.glob("rank*.pid"))) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    ranks = [int(p.read_text()) for p in pid_dir.glob("rank*.pid")]
    below = descendants(proc.pid)  # the torchrun agent; its ranks are in sessions of their own
    assert below
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = communicate_or_show_stacks(proc, 60)
    assert err.rstrip().splitlines()[-1] == "KeyboardInterrupt"
    assert wait_until_gone(ranks + below) == []


def test_a_rank_folders_failure_reads_as_the_launchers_does(tmp_path):
    # One WorkerError for both: torch's build paths left out, redrawn lines in their last state.
    from ddp_lib.launch._record import RankFiles, failure

    ok = RankFiles(0, tmp_path, finished=True, result=1)
    bad = RankFiles(1, tmp_path, finished=False, traceback="Traceback ...",
                    error="RuntimeError: [/__w/pytorch/gloo/pair.cc:534] Connection refused")
    error = failure([ok, bad])
    assert str(error) == "rank 1 raised RuntimeError: Connection refused"
    assert error.failures == {1: "RuntimeError: Connection refused"}
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "stdout.log").write_bytes(b"epoch 1\r epoch 2\r epoch 3\ndone\n")
    from ddp_lib.launch._record import _read
    assert _read(tmp_path / "0" / "stdout.log") == " epoch 3\ndone\n"


def test_a_rank_folders_failure_keeps_every_line_of_the_workers_message(tmp_path):
    # Kept in TorchrunJob.error, never raised: no traceback shows the lines after the first.
    from ddp_lib.launch._record import RankFiles, failure

    message = "RuntimeError: Error(s) in loading state_dict for MoonsNet:\n\tMissing key(s): \"fc1.weight\""
    bad = RankFiles(0, tmp_path, finished=False, traceback="Traceback ...", error=message)
    error = failure([bad, RankFiles(1, tmp_path, finished=True, result=1)])
    assert str(error) == ("rank 0 raised RuntimeError: Error(s) in loading state_dict for MoonsNet:\n"
                          "\tMissing key(s): \"fc1.weight\"")
    assert error.failures == {0: "RuntimeError: Error(s) in loading state_dict for MoonsNet:"}  # one line each


def test_a_result_that_is_not_finite_is_written_as_valid_json():
    from ddp_lib.launch._record import json_line

    line = json_line({"rank": 0, "result": {"loss": float("nan"), "steps": [1.0, float("inf")]}})
    assert json.loads(line) == {"rank": 0, "result": {"loss": None, "steps": [1.0, None]}}


def test_a_rank_killed_by_a_signal_without_a_name_is_described_not_a_crash():
    from ddp_lib.launch._job import _describe_exit

    assert _describe_exit(-9) == "was killed by SIGKILL before returning a result"
    assert _describe_exit(-40) == "was killed by <Unknown signal 40> before returning a result"


def test_node_commands_give_every_node_one_meeting_place():
    from ddp_lib.launch._torchrun_command import _option, node_commands

    c10d = node_commands(TRAIN, nnodes=2, nproc_per_node=1, options=("--log-dir=/x",))
    assert c10d[0] == c10d[1] and _option(c10d[0], "rdzv-endpoint").startswith("127.0.0.1:")
    assert _option(c10d[0], "log-dir") == "/x"  # the nodes share it: each reads back the ranks of both
    static = node_commands(TRAIN, nnodes=2, nproc_per_node=[2, 1], static=True)
    assert [_option(cmd, "node-rank") for cmd in static] == ["0", "1"]
    assert [_option(cmd, "nproc-per-node") for cmd in static] == ["2", "1"]
    assert _option(static[0], "master-port") == _option(static[1], "master-port")


def test_a_tensor_an_error_and_a_hang_read_the_same_through_the_launcher_and_torchrun():
    from record_workers import expect_same_record

    def through_torchrun(name: str, timeout: float = 120):
        cmd = torchrun_command(["-m", "ddp_lib.torchrun", f"record_workers:{name}"], nproc_per_node=2)
        job = run_torchrun(cmd, env={"PYTHONPATH": pythonpath_with_tests()}, timeout=timeout)
        if job.error:
            raise job.error
        return job.results

    def through_launcher(name: str, timeout: float = 120):
        import record_workers

        return run_ranks(getattr(record_workers, name), 2, timeout=timeout, show_output=False)

    through_launcher.hang_timeout = 6  # its ranks start from the forkserver within a second
    expect_same_record(through_launcher, through_torchrun)


def test_a_launcher_ranks_folder_holds_a_torchrun_ranks_files_and_reads_back_the_same(tmp_path, monkeypatch):
    import contextlib

    import record_workers

    from ddp_lib.errors import WorkerError
    from ddp_lib.launch import _run
    from ddp_lib.launch._record import read_rank

    kept = tmp_path / "launcher"

    @contextlib.contextmanager
    def kept_output_dir():  # the launch's folder, left in place to be read here
        kept.mkdir()
        yield str(kept)

    monkeypatch.setattr(_run, "output_dir", kept_output_dir)
    with pytest.raises(WorkerError) as launched:
        run_ranks(record_workers.returns_or_fails, 2, show_output=False)
    logs = tmp_path / "torchrun"
    job = run_torchrun(torchrun_command(["-m", "ddp_lib.torchrun", "record_workers:returns_or_fails"],
                                        nproc_per_node=2, options=(f"--log-dir={logs}",)),
                       env={"PYTHONPATH": pythonpath_with_tests()})
    (run,) = runs_in(logs)
    for rank, files in ((0, ["rank.json", "result.json", "stderr.log", "stdout.log"]),
                        (1, ["error.json", "rank.json", "stderr.log", "stdout.log"])):
        ours, theirs = kept / str(rank), run / "attempt_0" / str(rank)
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir()) == files
        mine, torchruns = read_rank(ours), read_rank(theirs)  # the one reader of a rank's folder
        assert (mine.rank, mine.finished, mine.result, mine.error, mine.stdout) == \
            (torchruns.rank, torchruns.finished, torchruns.result, torchruns.error, torchruns.stdout)
        assert mine.failure[:2] == torchruns.failure[:2] if rank else mine.failure is torchruns.failure is None
    assert read_rank(kept / "0").result == {"rank": 0, "value": 0.5}
    assert read_rank(kept / "0").stdout == "rank 0 returns\n"
    assert str(launched.value) == str(job.error) == "rank 1 raised ValueError: rank 1 of 2 cannot go on"


def test_run_launcher_stops_torchruns_ranks_when_the_test_times_out(tmp_path, pid_dir):
    # The tests' way to run a torchrun command: its ranks run in sessions of their own, so a
    # SIGKILL to torchrun alone (subprocess.run's timeout) would leave them running.
    script = tmp_path / "sleeper.py"
    script.write_text("import os, pathlib, sys, time\n"
                      "pathlib.Path(sys.argv[1], f\"rank{os.environ['RANK']}.pid\").write_text(str(os.getpid()))\n"
                      "time.sleep(600)\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(script), str(pid_dir)]
    with pytest.raises(AssertionError, match="did not finish within 25 s; stopped"):
        run_launcher(command, timeout=25)
    pids = recorded_pids(pid_dir)
    assert len(pids) == 2, "both ranks should have started within 25 s"
    assert wait_until_gone(pids) == []
