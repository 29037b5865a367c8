"""The launcher's guarantees beyond results: no silent wait, scripts, readable errors, nothing
left behind (not even a worker's own child processes or the output directory)."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from pathlib import Path

import launcher_workers
import pytest

from conftest import pythonpath_with_tests, recorded_pids, screen, wait_until_gone
from ddp_lib.errors import LaunchTimeout, WorkerError
from ddp_lib.launch import launch, run_ranks
from ddp_lib.launch._output import LiveOutput
from ddp_lib.workers import faulty_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_worker_that_sets_its_own_port_fails_at_once_naming_the_variable():
    run_ranks(launcher_workers.talk, 1, show_output=False)  # the forkserver's start-up is not what is timed
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_ranks(launcher_workers.set_own_port, 2, (12399,), timeout=120, show_output=False)
    assert "set MASTER_PORT='12399'" in str(info.value) and "ddp_lib.mp.labelled_spawn" in str(info.value)
    assert time.monotonic() - start < 20


def test_a_long_wait_with_nobody_at_the_store_prints_nothing_a_learner_cannot_act_on(capfd):
    with pytest.raises(LaunchTimeout):
        run_ranks(launcher_workers.hang_all, 2, timeout=7, show_output=False)
    assert capfd.readouterr().err == ""


def _run_script(tmp_path, body: str, timeout=180, env=None) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


def test_a_worker_defined_in_the_script_being_run_works(tmp_path):
    done = _run_script(tmp_path, """
        import ddp_lib.mp as mp
        from ddp_lib.launch import run_ranks

        def work(rank, world_size):
            return rank * 100

        if __name__ == "__main__":
            print(run_ranks(work, 2, show_output=False))
            print(mp.labelled_spawn(work, args=(7,), nprocs=2))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[0, 100]", "[0, 100]"]


def test_a_script_without_a_main_guard_gets_the_hint_in_the_error(tmp_path):
    done = _run_script(tmp_path, """
        from ddp_lib.launch import run_ranks

        def work(rank, world_size):
            return rank

        run_ranks(work, 2, show_output=False)
    """)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ddp_lib.errors.WorkerError: rank 0") and 'if __name__ == "__main__":' in last


def _format_with_ipython(exc: BaseException) -> str:
    from IPython.core.ultratb import FormattedTB

    return FormattedTB(mode="Context", theme_name="nocolor").text(type(exc), exc, exc.__traceback__)


@pytest.mark.parametrize("formatter", ["traceback", "ipython"])
def test_the_worker_traceback_shows_under_the_error(formatter):
    with pytest.raises(WorkerError) as info:
        run_ranks(faulty_ranks.raise_on_rank, 2, (1,), show_output=False)
    exc = info.value
    text = "".join(traceback.format_exception(exc)) if formatter == "traceback" else _format_with_ipython(exc)
    assert 'raise ValueError(f"rank {rank} was told to fail")' in text
    assert "ddp_lib/workers/faulty_ranks.py" in text and "rank 1 raised ValueError" in text


def test_a_killed_rank_and_a_timeout_read_right_when_formatted(pid_dir):
    with pytest.raises(WorkerError) as info:
        run_ranks(launcher_workers.die_on_rank, 2, (1, str(pid_dir)), show_output=False)
    assert "rank 1 was killed by SIGKILL" in "".join(traceback.format_exception(info.value))
    with pytest.raises(LaunchTimeout) as info:
        run_ranks(launcher_workers.sleep_in_named_function, 2, timeout=3, show_output=False)
    assert str(info.value).endswith("ranks 0, 1 still running were stopped")
    text = _format_with_ipython(info.value)
    assert "rank 1 was here when stopped" in text and "sleep_in_named_function" in text
    # The stack is in the error, not in what is printed as the rank's stderr (its thread
    # addresses change from run to run, and stored notebook outputs must not).
    assert all("most recent call first" not in err for _, err in info.value.outputs.values())
    with pytest.raises(LaunchTimeout, match=r"rank 1 still running was stopped$"):
        run_ranks(faulty_ranks.hang_on_rank, 2, (1,), timeout=2, show_output=False)


@pytest.mark.parametrize("fail", [False, True])
def test_processes_a_worker_starts_are_stopped_with_it(pid_dir, fail):
    if fail:
        with pytest.raises(WorkerError, match="rank 1 raised RuntimeError"):
            run_ranks(launcher_workers.start_grandchild, 2, (str(pid_dir), True), show_output=False)
    else:
        assert run_ranks(launcher_workers.start_grandchild, 2, (str(pid_dir),), show_output=False) == [0, 1]
    pids = recorded_pids(pid_dir)
    assert len(pids) == 2 and wait_until_gone(pids) == []


@pytest.mark.parametrize("how", ["returns", "raises", "hangs"])
def test_a_process_a_worker_starts_in_a_session_of_its_own_is_stopped_too(pid_dir, how):
    kwargs = dict(pid_dir=str(pid_dir), new_session=True, fail=how == "raises", hang=how == "hangs")
    if how == "returns":
        assert run_ranks(launcher_workers.start_grandchild, 2, kwargs=kwargs, show_output=False) == [0, 1]
    else:
        with pytest.raises((WorkerError, LaunchTimeout)):
            run_ranks(launcher_workers.start_grandchild, 2, kwargs=kwargs, timeout=8, show_output=False)
    pids = recorded_pids(pid_dir)
    assert len(pids) == 2 and wait_until_gone(pids) == []


def test_a_killed_caller_leaves_no_output_directory(pid_dir):
    # A short TMPDIR of its own: the forkserver's socket lives there, and a Unix socket's path may
    # not exceed about 100 bytes (pytest's own temporary paths grow with its run counter).
    tmp = Path(tempfile.mkdtemp(prefix="ddp-k-"))
    try:
        _kill_a_caller_in(tmp, pid_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_a_caller_in(tmp: Path, pid_dir: Path) -> None:
    script = textwrap.dedent(f"""
        from launcher_workers import hang_all

        from ddp_lib.launch import run_ranks
        if __name__ == "__main__":
            run_ranks(hang_all, 2, ({str(pid_dir)!r},))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script],
                            env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": pythonpath_with_tests()})
    end = time.monotonic() + 120
    while len(recorded_pids(pid_dir)) < 2:
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.05)
    # The launch's output folder, and multiprocessing's (the forkserver's socket): "pymp-*" before.
    made = ("ddp_lib-", "pymp-")
    assert len([p.name for p in tmp.iterdir() if p.name.startswith(made)]) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_until_gone(recorded_pids(pid_dir)) == []
    end = time.monotonic() + 10
    while any(p.name.startswith(made) for p in tmp.iterdir()) and time.monotonic() < end:
        time.sleep(0.05)
    assert [p.name for p in tmp.iterdir() if p.name.startswith(made)] == []


def test_a_result_that_cannot_be_unpickled_or_a_message_that_cannot_be_made_names_the_rank():
    with pytest.raises(WorkerError, match=r"^rank 1 raised RuntimeError: its return value cannot be unpickled"):
        run_ranks(launcher_workers.unloadable_result, 2, show_output=False)
    with pytest.raises(WorkerError, match=r"^rank 1 raised _BadMessage: \(its message could not be made"):
        run_ranks(launcher_workers.raise_bad_message, 2, show_output=False)


def test_rank_0s_output_shows_while_the_job_runs(tmp_path):
    script = tmp_path / "live.py"
    script.write_text(textwrap.dedent("""
        from ddp_lib.launch import run_ranks
        from launcher_workers import print_then_wait
        if __name__ == "__main__":
            run_ranks(print_then_wait, 2, (4,))
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, pythonpath_with_tests()])})
    first = proc.stdout.readline()
    seen_at = time.monotonic()
    rest = proc.stdout.read()
    ended_at = time.monotonic()
    assert proc.wait() == 0
    assert first == "[rank 0] early line from rank 0\n"
    assert ended_at - seen_at > 2  # printed while rank 0 still had 4 s to go
    assert rest.splitlines() == ["[rank 0] late line from rank 0", "[rank 1] late line from rank 1"]


def test_a_line_redrawn_with_carriage_returns_shows_as_one_line_updated_in_place(capsys):
    # As a progress bar draws itself (tqdm writes "\r" and the new state, no newline until it closes).
    result = launch(launcher_workers.redraw_a_line, 2, (4, 0.3))
    assert result.stderr == ["step 4/4\n", "step 4/4\n"]  # each rank's line in its last state
    err = capsys.readouterr().err
    assert screen(err) == ["[rank 0] step 4/4", "[rank 1] step 4/4"]
    # Rank 0's line was drawn while the job ran, each state over the last (carriage returns, no
    # newline in between); rank 1's was printed once, in its last state, after the job.
    assert err.count("\n") == 2 and err.count("[rank 0] step") >= 2 and err.count("[rank 1]") == 1


class _Stream:
    """Where the launcher prints: a terminal (stdout and stderr on one screen) or not (Jupyter)."""

    def __init__(self, tty: bool):
        self.text, self.tty = "", tty

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "jupyter"])
def test_a_bar_on_stderr_stays_one_line_below_the_lines_printed_on_stdout(tmp_path, monkeypatch, terminal):
    out_path, err_path = tmp_path / "rank0.out", tmp_path / "rank0.err"
    out = _Stream(terminal)
    err = out if terminal else _Stream(False)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    live = LiveOutput(str(out_path), str(err_path))
    seen = []
    for path, text in [(err_path, "\rtrain 1/3"), (out_path, "epoch 1\n"), (err_path, "\rtrain 2/3"),
                       (out_path, "epoch 2\n"), (err_path, "\rtrain 3/3\n")]:
        with open(path, "a") as f:
            f.write(text)
        live.poll(final=text.endswith("3/3\n"))
        seen.append(screen(out.text if terminal else err.text))
    if terminal:  # one screen: the lines above, the bar on the bottom line, never a stale copy of it
        assert seen == [["[rank 0] train 1/3"],
                        ["[rank 0] epoch 1", "[rank 0] train 1/3"],
                        ["[rank 0] epoch 1", "[rank 0] train 2/3"],
                        ["[rank 0] epoch 1", "[rank 0] epoch 2", "[rank 0] train 2/3"],
                        ["[rank 0] epoch 1", "[rank 0] epoch 2", "[rank 0] train 3/3"]]
    else:  # each stream in its own output area: the bar's redraws go to stderr untouched by stdout's lines
        assert err.text == "[rank 0] train 1/3\r[rank 0] train 2/3\r[rank 0] train 3/3\n"
        assert out.text == "[rank 0] epoch 1\n[rank 0] epoch 2\n"


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSEGV"])
def test_a_rank_killed_from_outside_leaves_no_process_it_started_in_a_session_of_its_own(sig, pid_dir):
    import threading

    raised = []

    def run() -> None:
        try:
            run_ranks(launcher_workers.session_child_then_wait, 2, args=(str(pid_dir),), show_output=False, timeout=60)
        except Exception as exc:
            raised.append(exc)

    launching = threading.Thread(target=run)
    launching.start()
    end = time.monotonic() + 60
    while len(recorded_pids(pid_dir)) < 2 or len(list(pid_dir.glob("*.child"))) < 2:
        assert time.monotonic() < end and launching.is_alive()
        time.sleep(0.05)
    children = [int(p.read_text()) for p in pid_dir.glob("*.child")]
    time.sleep(0.5)  # a few of the launcher's polls
    os.kill(int((pid_dir / "rank1.pid").read_text()), getattr(signal, sig))  # an OOM kill, a crash in C++
    launching.join(60)
    assert [str(e) for e in raised] == [f"rank 1 was killed by {sig} before returning a result"]
    assert wait_until_gone(children) == []
