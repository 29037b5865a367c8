"""ddp_lib.demos.torchrun_batch (lesson 06): its reading of a restart log, and its background jobs."""

import json
import re
import threading
from pathlib import Path

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
    # the last epoch is epochs - 1: a job of 5 epochs needs an epoch 4
    assert not torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG, epochs=5)["attempt 1 trained to the last epoch"]


def test_restart_report_reads_a_log_that_tee_prefixed():
    teed = "".join(("" if line.startswith("torchrun's") else f"[default{line.startswith('[rank1]'):d}]:") + line + "\n"
                   for line in RESTART_LOG.splitlines())
    assert torchrun_batch.restart_report(teed, FIRST_LOG) == torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG)



def test_restart_report_names_what_is_missing_and_shows_the_log_tail():
    # attempt 0 failed before the injected fault (say, its store port was taken): no rank 1 error
    started_late = RESTART_LOG.replace("[rank1]: RuntimeError: rank 1 fails in epoch 2\n", "")
    with pytest.raises(ValueError, match=r"no rank 1's injected error .*\n(.*\n)*torchrun's exit code: 0"):
        torchrun_batch.restart_report(started_late, FIRST_LOG)
    with pytest.raises(ValueError, match="no torchrun's exit code"):
        torchrun_batch.restart_report(RESTART_LOG.replace("torchrun's exit code: 0", ""), FIRST_LOG)

def test_lesson_jobs_runs_the_jobs_once_and_keeps_them(monkeypatch, capsys):
    runs = []

    def fake_run():
        print("starting")
        runs.append(object())
        return runs[-1]

    monkeypatch.setattr(torchrun_batch, "run_lesson_jobs", fake_run)
    monkeypatch.setattr(torchrun_batch, "_KEPT", [])
    first = torchrun_batch.lesson_jobs()
    assert torchrun_batch.lesson_jobs() is first and len(runs) == 1
    assert capsys.readouterr().out == "starting\n"  # the later call prints nothing


def test_start_lesson_jobs_returns_once_the_commands_are_printed_and_lesson_jobs_waits(monkeypatch, capsys):
    release = threading.Event()
    runs = []

    def fake_run(printed=None, show=True):
        print("the commands")
        printed.set()
        release.wait(10)  # the jobs still run after start_lesson_jobs returned
        runs.append(object())
        return runs[-1]

    monkeypatch.setattr(torchrun_batch, "run_lesson_jobs", fake_run)
    monkeypatch.setattr(torchrun_batch, "_KEPT", [])
    monkeypatch.setattr(torchrun_batch, "_RUNNING", [])
    torchrun_batch.start_lesson_jobs()
    assert capsys.readouterr().out == "the commands\n" and not runs
    torchrun_batch.start_lesson_jobs()  # a second start starts nothing
    release.set()
    first = torchrun_batch.lesson_jobs()  # waits for the background run
    assert first is runs[0] and torchrun_batch.lesson_jobs() is first and len(runs) == 1


def test_lesson_jobs_raises_what_the_background_run_raised(monkeypatch):
    def failing_run(printed=None, show=True):
        raise RuntimeError("a torchrun did not start")

    monkeypatch.setattr(torchrun_batch, "run_lesson_jobs", failing_run)
    monkeypatch.setattr(torchrun_batch, "_KEPT", [])
    monkeypatch.setattr(torchrun_batch, "_RUNNING", [])
    torchrun_batch.start_lesson_jobs()  # returns: the run ended before printing
    with pytest.raises(RuntimeError, match="did not start"):
        torchrun_batch.lesson_jobs()


# The jobs themselves run in lesson 06's Deeper sections (its cell `batch = torchrun_batch.lesson_jobs()`),
# and the cells after it print every verdict this file would check (exit codes, the wrong --rdzv-id, the
# rank folders, the signals): nbval compares them, so they are not run twice here.


def test_a_long_lost_connection_line_is_cut_after_a_whole_sentence():
    long = ("[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:4242. This is typically caused by a "
            "remote worker crashing. Check the logs of the remote worker before reading this rank's error.")
    report = torchrun_batch.restart_report(RESTART_LOG.replace(
        "[rank0]: RuntimeError: [/src/gloo/pair.cc:1] Read error [127.0.0.1]:4242: Connection reset by peer", long),
        FIRST_LOG)
    assert report["rank 0's lost connection"] == (
        "[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:PORT. "
        "This is typically caused by a remote worker crashing.")


def test_checkpoint_epoch_reads_the_saved_epoch(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 4}, path)
    assert torchrun_batch.checkpoint_epoch(path) == 4
    torch.save({"epoch": 0, "weights": [torch.zeros(2)]}, path)  # written differently: still read
    assert torchrun_batch.checkpoint_epoch(path) == 0
    torch.save({"model": model.state_dict()}, path)
    with pytest.raises(ValueError, match="no integer 'epoch'"):
        torchrun_batch.checkpoint_epoch(path)
    path.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip file
    with pytest.raises(ValueError, match="not a torch.save file"):
        torchrun_batch.checkpoint_epoch(path)



def test_the_lessons_recorded_restart_run_says_what_its_prose_says():
    """Lesson 06's prose after the restart run says the job succeeded. Its recorded outputs must agree:
    a re-execution whose restart run failed must not be committed under that prose."""
    import json
    from pathlib import Path

    lesson = json.loads((Path(__file__).parents[1] / "notebooks" / "06_torchrun.ipynb").read_text())
    cells = lesson["cells"]
    at = next(i for i, cell in enumerate(cells) if 'print("verdict:"' in "".join(cell["source"]))
    printed = "".join("".join(out.get("text", "")) for out in cells[at]["outputs"])
    # the job succeeded, or attempt 1 trained to the last epoch and only torch's abort at exit followed
    assert "verdict:" in printed and "attempt 1 trained to the last epoch" in printed, printed[-400:]
    assert "the job failed" not in printed, printed[-400:]
    prose = next(cell for cell in cells[at + 1:] if cell["cell_type"] == "markdown")  # the text after the run
    assert "trained to epoch 3" in "".join(prose["source"])


def test_restart_tally_counts_the_recorded_runs(tmp_path):
    from pathlib import Path

    recorded = torchrun_batch.restart_tally(Path(__file__).parents[1] / "notebooks" / "data")
    assert set(recorded) == {"shared", "fresh"}
    assert all(0 <= failed <= runs and runs > 0 for failed, runs in recorded.values())
    first, second = torchrun_batch.STORE_TALLIES
    (tmp_path / first).write_text("# store limit_s exit trained error\nshared 45 1 no refused\nfresh 45 0 yes -\n")
    (tmp_path / second).write_text("shared 60 0 yes - 0.4\n\nfresh 60 124 yes stopped 9.8\n")
    assert torchrun_batch.restart_tally(tmp_path) == {"shared": (1, 2), "fresh": (0, 2)}



def test_restart_verdict_tells_success_the_abort_at_exit_and_failure_apart():
    report = torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG)
    assert torchrun_batch.restart_verdict(report) == "the job succeeded, and attempt 1 trained to the last epoch"
    aborted = dict(report, **{"exit code": 1, "aborted at exit": True})
    assert "exit code 1 is torch's rare abort at exit" in torchrun_batch.restart_verdict(aborted)
    for failed in (dict(report, **{"exit code": 1}), dict(report, **{"attempt 1 trained to the last epoch": False})):
        assert torchrun_batch.restart_verdict(failed).startswith("the job failed")


def test_restart_tally_line_says_both_tallies(tmp_path):
    first, second = torchrun_batch.STORE_TALLIES
    (tmp_path / first).write_text("shared 45 1 no refused\nfresh 45 0 yes -\n")
    (tmp_path / second).write_text("shared 60 0 yes - 0.4\n")
    line = torchrun_batch.restart_tally_line(tmp_path)
    assert line.endswith("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, attempt 1 failed in 1 of 2 runs; with it, in 0 of 1")
    # it says the numbers are earlier runs, kept in files, not the run the lesson just made
    assert line.startswith("earlier runs of the restart job, recorded in data/:")



def test_static_restart_tally_says_how_the_recorded_runs_ended(tmp_path):
    from pathlib import Path

    line = torchrun_batch.static_restart_tally(Path(__file__).parents[1] / "notebooks" / "data")
    assert line == ("attempt 1 did not finish in 8 of 8 recorded runs: 3 failed in gloo's first step,"
                    " 5 still waiting at the 60-s limit")
    (tmp_path / torchrun_batch.STATIC_TALLY).write_text(
        "# limit_s node0 node1 trained error load\n60 124 124 no - 7.1\n\n60 0 0 yes - 2.0\n"
        "60 1 124 no connectFullMesh-failed 3.1\n60 1 1 no - 1.0\n")
    assert torchrun_batch.static_restart_tally(tmp_path) == (
        "attempt 1 did not finish in 3 of 4 recorded runs: 1 failed in gloo's first step,"
        " 1 still waiting at the 60-s limit, 1 in another way")

def test_restart_report_tells_the_abort_at_exit_from_a_failure():
    """Exit code 1 after the last epoch (3, of 4) with a rank ended by SIGABRT is torch's abort at exit,
    not a failed job."""
    aborted = RESTART_LOG.replace("torchrun's exit code: 0", "failed (exitcode: -6) local_rank: 0\n"
                                  "  error_file: <N/A>\n  traceback : Signal 6 (SIGABRT) received by PID 7\n"
                                  "torchrun's exit code: 1")
    report = torchrun_batch.restart_report(aborted, FIRST_LOG)
    assert report["exit code"] == 1 and report["attempt 1 trained to the last epoch"] and report["aborted at exit"]
    assert not torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG)["aborted at exit"]
    failed = RESTART_LOG.replace("torchrun's exit code: 0", "torchrun's exit code: 1")  # no SIGABRT: a failure
    assert not torchrun_batch.restart_report(failed, FIRST_LOG)["aborted at exit"]
    never_trained = aborted.replace("epoch 3: last loss 0.2\n", "")
    report = torchrun_batch.restart_report(never_trained, FIRST_LOG)
    assert not report["attempt 1 trained to the last epoch"] and not report["aborted at exit"]


def test_start_main_jobs_runs_each_command_in_a_shell_and_prints_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_work" / "failing").mkdir(parents=True)  # an old --log-dir, removed first
    monkeypatch.setattr(torchrun_batch, "MAIN_JOBS", {"ok": "echo out; echo err >&2", "bad": "exit 3",
                                                      "failing": "true"})
    monkeypatch.setattr(torchrun_batch, "_MAIN_RUNNING", {})
    running = torchrun_batch.start_main_jobs()
    assert capsys.readouterr().out == ("3 jobs started in the background for later sections;"
                                       " each section prints its command\n")  # one line, no commands
    assert {name: process.wait(30) for name, process in running.items()} == {"ok": 0, "bad": 3, "failing": 0}
    assert Path("my_work/ok.out").read_text() == "out\n" and Path("my_work/ok.err").read_text() == "err\n"
    assert not Path("my_work/failing").exists()
    assert torchrun_batch.main_job("bad") == 3  # the same process, waited for, not run again
    assert capsys.readouterr().out == "$ exit 3\n"


def test_main_job_starts_a_job_that_was_not_started(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_work").mkdir()
    monkeypatch.setattr(torchrun_batch, "MAIN_JOBS", {"once": "echo ran >> my_work/count; exit 2"})
    monkeypatch.setattr(torchrun_batch, "_MAIN_RUNNING", {})
    assert torchrun_batch.main_job("once") == 2
    assert torchrun_batch.main_job("once") == 2  # kept: not run a second time
    assert Path("my_work/count").read_text() == "ran\n"
    assert capsys.readouterr().out == "$ echo ran >> my_work/count; exit 2\n" * 2


def test_show_masked_hides_this_machines_paths(tmp_path, capsys):
    log = tmp_path / "restart.log"
    log.write_text('File "/opt/env/lib/python3.12/site-packages/torch/x.py", line 1\n'
                   "failed (exitcode: 1) of binary: /opt/env/bin/python3\n"
                   "/home/me/repo/notebooks/my_work/train.py ran\n")
    torchrun_batch.show_masked(log, repo="/home/me/repo")
    assert capsys.readouterr().out == ('File ".../site-packages/torch/x.py", line 1\n'
                                       "failed (exitcode: 1) of binary: PYTHON\n"
                                       "REPO/notebooks/my_work/train.py ran\n")
    torchrun_batch.show_masked(log, repo="/home/me/repo", last=2)  # the end only, masked the same way
    assert capsys.readouterr().out == ("failed (exitcode: 1) of binary: PYTHON\n"
                                       "REPO/notebooks/my_work/train.py ran\n")


def test_first_run_verdict_tells_success_the_abort_at_exit_and_failure_apart():
    trained = FIRST_LOG
    assert torchrun_batch.first_run_verdict(trained + "torchrun's exit code: 0\n") == (
        "verdict: trained to epoch 3; exit code 0")
    aborted = torchrun_batch.first_run_verdict(
        trained + "E1207 api.py] failed (exitcode: -6) local_rank: 1 (pid: 7) of binary: python\n"
        "torchrun's exit code: 1\n")
    assert aborted.startswith("verdict: trained to epoch 3; exit code 1 is the rare abort at exit")
    # it names the folded section that explains the abort by its title, a heading of lesson 06
    title = re.search(r'\("(Deeper: [^"]+)", above\)$', aborted)[1]
    lesson = json.loads(Path(__file__).parents[1].joinpath("notebooks", "06_torchrun.ipynb").read_text())
    assert any("".join(cell["source"]).startswith(f"## {title}") for cell in lesson["cells"]), title
    # a SIGABRT before the last epoch is a failure, as is an exit code 1 without SIGABRT
    early = "epoch 0: last loss 0.5\nexitcode: -6\n" + trained + "torchrun's exit code: 1\n"
    assert torchrun_batch.first_run_verdict(early).startswith("verdict: the job failed (exit code 1)")
    assert torchrun_batch.first_run_verdict("epoch 0: last loss 0.5\ntorchrun's exit code: 1\n").startswith(
        "verdict: the job failed (exit code 1)")
    assert "did not run to its end" in torchrun_batch.first_run_verdict(trained)


def test_restart_report_picks_torchruns_own_lines_with_ids_masked():
    agent = ("W1207 05:34:14.083000 25525 torch/distributed/elastic/multiprocessing/api.py:1028]"
             " Sending process 25790 closing signal SIGTERM\n"
             "E1207 05:34:14.517000 25525 torch/distributed/elastic/multiprocessing/api.py:1002]"
             " failed (exitcode: 1) local_rank: 1 (pid: 25792) of binary: /some/venv/bin/python3\n"
             "W1207 05:30:18.174000 21216 torch/distributed/run.py:874] Setting OMP_NUM_THREADS\n")
    log = RESTART_LOG.replace("attempt 1:", agent + "attempt 1:")
    assert torchrun_batch.restart_report(log, FIRST_LOG)["agent lines"] == [
        "W ... Sending process PID closing signal SIGTERM",
        "E ... failed (exitcode: 1) local_rank: 1 (pid: PID) of binary: PYTHON"]
    assert torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG)["agent lines"] == []
    # the W line's process id is not the failed rank's: of two ranks, the other one got SIGTERM
    assert torchrun_batch.restart_report(log, FIRST_LOG)["SIGTERM sent to local ranks"] == [0]
    assert torchrun_batch.restart_report(RESTART_LOG, FIRST_LOG)["SIGTERM sent to local ranks"] == []


HANG_ERR = "".join(line + "\n" for line in (
    "W1207 14:40:37.620000 14757 torch/distributed/run.py:874] ",
    "W1207 14:40:37.620000 14757 torch/distributed/run.py:874] *****************************************",
    "W1207 14:40:37.620000 14757 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable",
    "W1207 14:40:37.620000 14757 torch/distributed/run.py:874] *****************************************",
    "[rank0]: some traceback line",
    "W1207 14:40:39.000000 14757 torch/distributed/elastic/multiprocessing/api.py:1028]"
    " Sending process 14790 closing signal SIGTERM",
    "E1207 14:40:39.500000 14757 torch/distributed/elastic/multiprocessing/api.py:1002]"
    " failed (exitcode: 1) local_rank: 0 (pid: 14789) of binary: /venv/bin/python3"))


def test_agent_lines_leave_out_the_banner_and_the_process_ids():
    assert torchrun_batch.agent_lines(HANG_ERR) == ["Sending closing signal SIGTERM",
                                                    "failed (exitcode: 1) local_rank: 0"]
    assert torchrun_batch.agent_lines("[rank0]: nothing torchrun logged\n") == []


def test_store_error_and_tries_read_a_ranks_stderr():
    err = ("W1207 1:1:1.0 1 socket.cpp:1] [c10d] The client socket has failed to connect to [localhost]:12355\n"
           "W1207 1:1:1.0 1 TCPStore.cpp:1] [c10d] TCP client failed to connect/validate to host localhost:12355"
           " - retrying (try=0, timeout=1000ms, delay=500ms): ...\n"
           "E1207 1:1:1.0 1 TCPStore.cpp:1] [c10d] TCP client failed to connect/validate to host localhost:12355"
           " - timed out (try=1, timeout=1000ms): ...\n"
           "torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while trying to"
           " connect to (localhost, 12355).\n")
    assert torchrun_batch.store_error(err).startswith("DistNetworkError: The client socket has timed out")
    assert torchrun_batch.store_client_tries(err) == ["retrying", "timed out"]
    assert torchrun_batch.store_error("a\nlast line\n") == "no DistNetworkError; last line: last line"


def test_env_value_and_failure_lines():
    env_log = "rank 0: MASTER_PORT   4242\nrank 1: MASTER_PORT   4243\n"
    assert torchrun_batch.env_value(env_log, 1, "MASTER_PORT") == "4243"
    err = ("E1207 1:1:1.0 1 errors/__init__.py:1] no error file defined for parent, to copy child error file"
           " (/tmp/x/failing/run_ab/attempt_0/0/error.json)\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    assert torchrun_batch.failure_lines(err) == (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "no error file defined for parent, to copy child error file (LOG_DIR/.../attempt_0/0/error.json)")
