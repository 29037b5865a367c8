"""The launcher with real processes on gloo: results, output, errors, deadlines, clean-up."""

import functools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import launcher_workers
import pytest

from conftest import pythonpath_with_tests, recorded_pids, wait_until_gone
from ddp_lib.errors import LaunchTimeout, WorkerError
from ddp_lib.launch import launch, run_ranks
from ddp_lib.workers import faulty_ranks
from ddp_lib.workers.basic import demo_basic


def test_results_come_back_in_rank_order_even_when_later_ranks_finish_first():
    assert run_ranks(launcher_workers.talk, 3, (1, 0.3), show_output=False) == [0, 10, 20]


def test_keyword_arguments_and_partials_reach_the_worker():
    assert run_ranks(launcher_workers.talk, 2, kwargs=dict(lines=0, delay=0.0), show_output=False) == [0, 10]
    # A partial's keywords merge with the launch's kwargs (positional partial args are refused).
    worker = functools.partial(launcher_workers.talk, lines=0)
    assert run_ranks(worker, 2, (), kwargs=dict(delay=0.0), show_output=False) == [0, 10]
    assert run_ranks(functools.partial(faulty_ranks.raise_on_rank, bad_rank=5), 2, show_output=False) == [0, 1]


def test_output_is_captured_per_rank_and_printed_in_rank_order(capsys):
    result = launch(launcher_workers.talk, 2, (2, 0.2))
    assert result.stdout == ["line 0 from rank 0\nline 1 from rank 0\n", "line 0 from rank 1\nline 1 from rank 1\n"]
    assert result.stderr == ["a warning from rank 0\n", "a warning from rank 1\n"]
    out, err = capsys.readouterr()
    assert out.splitlines() == ["[rank 0] line 0 from rank 0", "[rank 0] line 1 from rank 0",
                                "[rank 1] line 0 from rank 1", "[rank 1] line 1 from rank 1"]
    assert err.splitlines() == ["[rank 0] a warning from rank 0", "[rank 1] a warning from rank 1"]


def test_show_output_stdout_only_and_off(capsys):
    launch(launcher_workers.talk, 2, (1,), show_output="stdout")
    out, err = capsys.readouterr()
    assert "[rank 1] line 0 from rank 1" in out and err == ""
    launch(launcher_workers.talk, 2, (1,), show_output=False)
    assert capsys.readouterr() == ("", "")


def test_each_rank_gets_the_launch_environment():
    envs = run_ranks(launcher_workers.report_env, 2)
    for rank, env in enumerate(envs):
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["has_port"]
        numbers = (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"])
        assert numbers == (str(rank), str(rank), "2", "2")
        assert env["threads"] == int(env["OMP_NUM_THREADS"]) >= 1


def test_extra_env_reaches_every_rank():
    envs = run_ranks(launcher_workers.report_env, 2, env={"OMP_NUM_THREADS": 1})
    assert [e["threads"] for e in envs] == [1, 1]


def test_extra_env_per_rank_reaches_only_its_rank():
    envs = run_ranks(launcher_workers.report_env, 2, env=[{"OMP_NUM_THREADS": 1}, {"OMP_NUM_THREADS": 2}])
    assert [e["threads"] for e in envs] == [1, 2]


def test_demo_basic_gives_every_rank_the_same_parameters():
    for world_size in (1, 2, 4):
        results = run_ranks(demo_basic, world_size, show_output=False)
        assert [r["rank"] for r in results] == list(range(world_size))
        assert len({r["checksum"] for r in results}) == 1
        # Different data per rank, so different losses: the agreement is DDP's doing.
        if world_size > 1:
            assert len({r["loss"] for r in results}) == world_size


def test_many_launches_in_a_row_never_hang_on_teardown():
    # With torch 2.13 + gloo, a group freed while gloo threads release work can deadlock
    # (docs/launcher.md counts it per ending); the launcher's child keeps every group alive
    # until it leaves with os._exit, so no launch may hang.
    for _ in range(20):
        run_ranks(demo_basic, 2, timeout=20, show_output=False)


def test_a_worker_exception_names_the_rank_type_and_message(pid_dir):
    with pytest.raises(WorkerError) as info:
        run_ranks(faulty_ranks.raise_on_rank, 3, (2, str(pid_dir)), show_output=False)
    err = info.value
    assert str(err) == "rank 2 raised ValueError: rank 2 was told to fail"
    assert (err.rank, err.exc_type, err.message) == (2, "ValueError", "rank 2 was told to fail")
    assert 'raise ValueError(f"rank {rank} was told to fail")' in err.worker_traceback
    assert err.failures == {2: "ValueError: rank 2 was told to fail"}
    assert wait_until_gone(recorded_pids(pid_dir)) == []


def test_the_rank_that_failed_first_is_blamed_not_the_peers_it_broke():
    with pytest.raises(WorkerError) as info:
        run_ranks(launcher_workers.raise_in_collective, 3, (2,), show_output=False)
    assert str(info.value) == "rank 2 raised ValueError: rank 2 was told to fail"


def test_when_every_rank_fails_alike_the_lowest_rank_is_named_every_time():
    for _ in range(3):
        with pytest.raises(WorkerError) as info:
            run_ranks(launcher_workers.raise_everywhere, 3, show_output=False)
        assert info.value.rank == 0 and sorted(info.value.failures) == [0, 1, 2]


def test_a_killed_rank_is_named_and_the_others_are_stopped(pid_dir):
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"^rank 1 was killed by SIGKILL before returning a result$") as info:
        run_ranks(launcher_workers.die_on_rank, 3, (1, str(pid_dir)), show_output=False)
    assert info.value.exc_type == "" and time.monotonic() - start < 30  # the others sleep 60 s
    pids = recorded_pids(pid_dir)
    assert len(pids) == 3 and wait_until_gone(pids) == []


def test_a_rank_that_exits_without_raising_is_named():
    with pytest.raises(WorkerError, match=r"^rank 0 exited with code 3 before returning a result$"):
        run_ranks(launcher_workers.exit_on_rank, 2, (0, 3), show_output=False)


def test_the_deadline_turns_a_hang_into_an_error_and_stops_every_rank(pid_dir):
    with pytest.raises(LaunchTimeout) as info:
        run_ranks(faulty_ranks.hang_on_rank, 3, (1, str(pid_dir)), timeout=2, show_output=False)
    assert info.value.running == [1]
    assert "did not finish within its 2 s deadline; rank 1 still running was stopped" in str(info.value)
    assert wait_until_gone(recorded_pids(pid_dir)) == []


def test_a_return_value_that_cannot_be_pickled_is_an_error_naming_the_rank():
    with pytest.raises(WorkerError, match=r"^rank 0 returned a value that cannot be pickled, so it cannot be sent"):
        run_ranks(_unpicklable_result, 1, show_output=False)


def _unpicklable_result(rank, world_size):
    return threading.Lock()


def test_concurrent_launches_do_not_collide():
    results, errors = {}, []

    def one(i):
        try:
            results[i] = [run_ranks(demo_basic, 2, (i,), show_output=False) for _ in range(3)]
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(results) == [0, 1, 2, 3]
    for runs in results.values():
        assert all(len({r["checksum"] for r in run}) == 1 for run in runs)


def test_an_edited_worker_module_takes_effect_on_the_next_launch(tmp_path, monkeypatch):
    module = tmp_path / "edited_worker.py"
    module.write_text("def value(rank, world_size):\n    return 'first'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import edited_worker

    assert run_ranks(edited_worker.value, 2) == ["first", "first"]
    module.write_text("def value(rank, world_size):\n    return 'second'\n")
    assert run_ranks(edited_worker.value, 2) == ["second", "second"]


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_other_start_methods_work(start_method):
    results = run_ranks(demo_basic, 2, start_method=start_method, show_output=False)
    assert len({r["checksum"] for r in results}) == 1


def _run_launcher_script(pid_dir, body: str) -> subprocess.Popen:
    script = textwrap.dedent(f"""
        from launcher_workers import hang_all, hang_deaf_to_sigterm

        from ddp_lib.launch import run_ranks
        if __name__ == "__main__":
            {body}
    """)
    # -X faulthandler: a launcher that does not exit can be made to print every thread's stack (SIGABRT).
    env = {**os.environ, "PYTHONPATH": pythonpath_with_tests()}
    return subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def communicate_or_show_stacks(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; past it, fail with the stacks of every thread of ``proc`` (run
    with ``-X faulthandler``), so that a launcher that hangs says where."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"still running {timeout} s after SIGINT; its threads were here:\n{err[-6000:]}")


def _wait_for_pids(pid_dir, count, proc, seconds=120):  # a fresh interpreter imports torch: slow under load
    end = time.monotonic() + seconds
    while len(recorded_pids(pid_dir)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "ranks did not start"
        time.sleep(0.05)
    return recorded_pids(pid_dir)


def test_keyboard_interrupt_in_the_caller_stops_every_rank(pid_dir):
    proc = _run_launcher_script(pid_dir, f"run_ranks(hang_all, 2, ({str(pid_dir)!r},))")
    pids = _wait_for_pids(pid_dir, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = communicate_or_show_stacks(proc, 30)
    assert err.rstrip().splitlines()[-1] == "ddp_lib.errors.LaunchInterrupted: interrupted: ranks 0-1 stopped"
    assert "selectors.py" not in err and "connection.py" not in err  # not where the signal happened to land
    assert wait_until_gone(pids) == []


def test_a_second_ctrl_c_while_the_ranks_are_being_stopped_waits_until_they_are(pid_dir):
    # Before: the second press cut the stop short, and the launcher waited at exit forever for
    # ranks still running (multiprocessing joins every child it started).
    proc = _run_launcher_script(pid_dir, f"run_ranks(hang_deaf_to_sigterm, 2, ({str(pid_dir)!r},))")
    pids = _wait_for_pids(pid_dir, 2, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(1)  # inside the grace period between SIGTERM, which these ranks ignore, and SIGKILL
    proc.send_signal(signal.SIGINT)
    _, err = communicate_or_show_stacks(proc, 30)
    assert err.rstrip().splitlines()[-1] == "ddp_lib.errors.LaunchInterrupted: interrupted: ranks 0-1 stopped"
    assert wait_until_gone(pids) == []


def test_ctrl_c_while_the_ranks_are_starting_stops_every_rank_started(pid_dir, monkeypatch):
    # Ctrl-C lands after rank 1 has started and before the launcher has taken its OwnProcess
    # (a window a loaded machine widens): stopping must still find it.
    from ddp_lib.launch import _job

    taken = []

    def own_process_then_ctrl_c(pid):
        taken.append(pid)
        if len(taken) == 2:
            raise KeyboardInterrupt
        return real(pid)

    real = _job.OwnProcess
    monkeypatch.setattr(_job, "OwnProcess", own_process_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="ranks 0-1 stopped"):
        run_ranks(launcher_workers.hang_all, 2, (str(pid_dir),), show_output=False)
    assert len(taken) == 3  # rank 1's was taken again, by the stop
    assert wait_until_gone(taken[:2]) == []


def test_ranks_end_when_the_caller_is_killed(pid_dir):
    proc = _run_launcher_script(pid_dir, f"run_ranks(hang_all, 2, ({str(pid_dir)!r},))")
    pids = _wait_for_pids(pid_dir, 2, proc)
    proc.kill()  # no clean-up code runs in the caller: the ranks' watchdogs must act
    proc.wait()
    assert wait_until_gone(pids, seconds=10) == []


def test_ctrl_c_that_lands_just_before_the_stop_holds_presses_stops_every_rank_all_the_same(pid_dir, monkeypatch):
    # The stop is interrupted before it can hold Ctrl-C back (here: as it begins); it runs again.
    import contextlib

    from ddp_lib.launch import _job

    entered = []

    @contextlib.contextmanager
    def pressed_as_it_begins():
        entered.append(True)
        if len(entered) == 1:
            raise KeyboardInterrupt
        with real():
            yield

    real = _job.ctrl_c_held
    monkeypatch.setattr(_job, "ctrl_c_held", pressed_as_it_begins)
    with pytest.raises(KeyboardInterrupt, match="ranks 0-1 stopped"):
        run_ranks(launcher_workers.hang_all, 2, (str(pid_dir),), timeout=5, show_output=False)
    assert len(entered) == 2
    assert wait_until_gone(recorded_pids(pid_dir)) == []


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="Python's own Ctrl-C handler is not installed in this process")
def test_ctrl_c_held_raises_a_press_once_the_block_ends_but_never_hides_an_error():
    from ddp_lib.launch._processes import ctrl_c_held

    done = []
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            done.append("the block ran to its end")
    assert done == ["the block ran to its end"]
    with pytest.raises(RuntimeError, match="a bug while stopping"):
        with ctrl_c_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            raise RuntimeError("a bug while stopping")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
