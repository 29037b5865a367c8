"""Lesson 02: how processes are started. Real processes on gloo; raw torch.multiprocessing
launches use forkserver (warm, fast). The spawn start method's failure on a function defined in
__main__ is lesson 02's own cell (notebooks/02_spawn.ipynb, its output compared by nbval under make test-lessons)."""

from __future__ import annotations

import inspect
import json
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddp_lib.cli import main as cli_main
from ddp_lib.demos.spawning import (
    _cpu_ticks,
    capture_stderr,
    checksums_by_stage,
    exit_verdict,
    fork_after_threads,
    fork_while_lock_held,
    last_line,
    short_paths,
    spawn_loop_source,
    start_time_table,
    time_start_methods,
)
from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.forkserver import FORKSERVER_PRELOAD
from ddp_lib.launch import launch, run_ranks
from ddp_lib.mp import labelled_spawn as ddp_spawn
from ddp_lib.process_group import free_port
from ddp_lib.workers import WORKERS
from ddp_lib.workers.spawning import (
    bytes_to_queue,
    chatty,
    ddp_step_shared_model,
    describe_rank,
    fail_on_rank,
    hang,
    hello,
    log_then_fail,
    noop,
    rank_from_environment,
    read_calls,
    record_args,
    step_fails_on_rank,
    step_shared_model,
)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.fixture(scope="module", autouse=True)
def preloaded_forkserver():
    # The forkserver is one per process and keeps the preload list it started with. Started by a
    # raw start_processes call without this, every child would import torch itself (seconds each).
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)


def test_rank_is_the_index_start_processes_puts_first(tmp_path):
    assert mp.start_processes(record_args, args=(3, str(tmp_path)), nprocs=3, start_method="forkserver") is None
    calls = read_calls(str(tmp_path))
    assert [(c["i"], c["world_size"]) for c in calls] == [(0, 3), (1, 3), (2, 3)]
    assert len({c["pid"] for c in calls}) == 3 and os.getpid() not in {c["pid"] for c in calls}


def test_spawn_loop_source_shows_the_loop_and_the_call():
    source = spawn_loop_source()
    for line in ("for i in range(nprocs):", "args=(fn, i, args, tf.name),", "fn(i, *args)", "process.start()"):
        assert line in source
    assert "#" not in source.replace("# torch.multiprocessing.spawn.", "")  # comments dropped


def test_spawn_loop_source_marks_every_gap():
    """Two shown lines that are not neighbours in torch's code (comments and blank lines aside)
    have a "..." line between them."""
    module = sys.modules["torch.multiprocessing.spawn"]
    for part in spawn_loop_source().split("# torch.multiprocessing.spawn.")[1:]:
        name, *shown = part.rstrip("\n").split("\n")
        code = [line.split("  #")[0].rstrip() for line in inspect.getsource(getattr(module, name)).splitlines()]
        code = [line for line in code if line.strip() and not line.strip().startswith("#")]
        position = -1
        for line in shown:
            if line.strip() == "...":
                position = None  # the next shown line may be anywhere later
                continue
            later = code.index(line, 0 if position is None else position + 1)
            assert position is None or later == position + 1, f"{name}: a gap before {line!r} is not marked"
            position = later


def test_ddp_lib_passes_rank_world_size_and_environment():
    results = run_ranks(describe_rank, 3)
    assert [(r["rank"], r["world_size"], r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"]) for r in results] == [
        (0, 3, "0", "0", "3"), (1, 3, "1", "1", "3"), (2, 3, "2", "2", "3")]
    assert {r["sum"] for r in results} == {6}  # 1 + 2 + 3: the all-reduce really ran
    assert len({r["MASTER_PORT"] for r in results}) == 1 and results[0]["MASTER_ADDR"] == "127.0.0.1"


def test_non_tuple_args_fail_in_the_child_with_raw_torch():
    with capture_stderr(), pytest.raises(mp.ProcessRaisedException) as info:
        mp.start_processes(record_args, args=(2), nprocs=2, start_method="forkserver")
    assert last_line(str(info.value)) == "TypeError: Value after * must be an iterable, not int"


def test_non_tuple_args_are_refused_before_starting():
    with pytest.raises(LaunchInputError, match=r"got int 1; \(x\) is just x in Python, write args=\(1,\)"):
        run_ranks(fail_on_rank, 2, args=(1))
    with pytest.raises(LaunchInputError, match=r"write args=\('gloo',\)"):
        run_ranks(fail_on_rank, 2, args=("gloo"))


def test_function_from_main_is_refused_before_starting():
    def local_hello(rank, world_size):
        return rank

    local_hello.__module__, local_hello.__qualname__ = "__main__", "local_hello"
    with pytest.raises(LaunchInputError,
                       match=r"defined in __main__ .* %%writefile my_worker.py then from my_worker import local_hello"):
        run_ranks(local_hello, 2)


def test_a_held_port_gives_address_already_in_use():
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        with mock.patch.dict(os.environ, {"MASTER_ADDR": "localhost", "MASTER_PORT": str(port)}):
            with pytest.raises(dist.DistNetworkError, match="EADDRINUSE, message: address already in use"):
                dist.init_process_group("gloo", rank=0, world_size=2, timeout=timedelta(seconds=10))
    assert not dist.is_initialized()


def test_launches_in_a_row_beside_a_held_port():
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        for _ in range(2):
            results = run_ranks(describe_rank, 2)
            assert [r["sum"] for r in results] == [3, 3]
            assert port not in {r["MASTER_PORT"] for r in results}


def test_worker_error_names_rank_type_and_message():
    with pytest.raises(WorkerError) as info:
        run_ranks(fail_on_rank, 3, args=(2,), show_output=False)
    e = info.value
    assert str(e) == "rank 2 raised ValueError: rank 2 of 3 was told to fail"
    assert (e.rank, e.exc_type, e.message) == (2, "ValueError", "rank 2 of 3 was told to fail")
    assert e.failures == {2: "ValueError: rank 2 of 3 was told to fail"}
    assert last_line(e.worker_traceback) == "ValueError: rank 2 of 3 was told to fail"


def test_raw_torch_reports_a_traceback_in_text():
    with capture_stderr() as err, pytest.raises(mp.ProcessRaisedException) as info:
        mp.start_processes(fail_on_rank, args=(2, 1), nprocs=2, start_method="forkserver")
    assert info.value.error_index == 1
    assert str(info.value).strip().splitlines()[0] == "-- Process 1 terminated with the following error:"
    assert last_line(str(info.value)) == "ValueError: rank 1 of 2 was told to fail"
    assert "Terminating process" not in err.text  # the logger was quietened, not just redirected


def test_rank_from_environment_works_under_ddp_lib_and_fails_under_raw_torch():
    assert ddp_spawn(rank_from_environment, nprocs=2) == [0, 1]
    with capture_stderr(), pytest.raises(mp.ProcessRaisedException) as info:
        mp.start_processes(rank_from_environment, nprocs=2, start_method="forkserver")
    assert last_line(info.value.msg) == "KeyError: 'RANK'"


def test_raw_torch_stops_a_waiting_rank_and_its_unflushed_line_is_lost(tmp_path):
    init_method = f"tcp://127.0.0.1:{free_port()}"
    context = mp.start_processes(log_then_fail, args=(2, init_method, str(tmp_path)), nprocs=2,
                                 start_method="forkserver", join=False)
    with capture_stderr() as err, pytest.raises(mp.ProcessRaisedException) as info:
        context.join()
    assert info.value.error_index == 1
    assert [process.exitcode for process in context.processes] == [-15, 1]
    assert err.torch_log == [f"Terminating process {context.processes[0].pid} via signal SIGTERM"]
    assert (tmp_path / "rank0.log").read_text().splitlines() == ["rank 0: line 1, flushed"]
    assert (tmp_path / "rank0.out").read_text() == ""  # the plain print() to standard output, lost too


def test_a_rank_failing_mid_step_is_reported_at_once_with_no_collective_in_finally():
    # Lesson 02's script shape: barrier on the success path, only destroy_process_group in finally.
    # Rank 0 waits in backward's all-reduce; torch reports a failure well inside the 30-minute
    # timeout: rank 1's ValueError, or rank 0's lost connection to it (closed or reset).
    started = time.perf_counter()
    with capture_stderr(), pytest.raises((mp.ProcessRaisedException, mp.ProcessExitedException)) as info:
        mp.start_processes(step_fails_on_rank, args=(2, f"tcp://127.0.0.1:{free_port()}"), nprocs=2,
                           start_method="forkserver")
    assert time.perf_counter() - started < 120
    reported = last_line(getattr(info.value, "msg", ""))
    peer_left = re.search("Connection (closed|reset) by peer", reported)
    assert reported.startswith("ValueError: rank 1 of 2") or peer_left, reported


def test_a_rank_that_exits_or_is_killed_gives_process_exited_exception():
    from ddp_lib.workers.spawning import exit_early

    for how, words, code in [("exit", "exit code 3", 3), ("kill", "signal SIGKILL", -9)]:
        with pytest.raises(mp.ProcessExitedException) as info:
            mp.start_processes(exit_early, args=(how,), nprocs=1, start_method="forkserver")
        assert str(info.value) == f"process 0 terminated with {words}"
        assert info.value.exit_code == code


def test_a_hung_rank_is_stopped_by_join_timeout_and_terminate():
    context = mp.start_processes(hang, args=(60,), nprocs=2, join=False, start_method="forkserver")
    assert context.join(timeout=0.5) is False  # still running: join gave up after its timeout
    for process in context.processes:
        process.terminate()
        process.join()
    assert [process.exitcode for process in context.processes] == [-15, -15]


def test_a_cpu_model_in_args_is_one_shared_copy_that_every_rank_steps():
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    mp.start_processes(step_shared_model, args=(model, 0.1), nprocs=2, start_method="forkserver")
    assert model.weight.item() == pytest.approx(-0.2)


def test_a_cpu_model_in_args_takes_the_averaged_ddp_step_once_per_rank():
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    init_method = f"tcp://127.0.0.1:{free_port()}"
    mp.start_processes(ddp_step_shared_model, args=(2, init_method, model), nprocs=2, start_method="forkserver")
    # the ranks step in turn: two exact float32 SGD steps of lr 0.1 on the averaged gradient 4
    expected = torch.zeros(1, 1)
    for _ in range(2):
        expected.add_(torch.full((1, 1), 4.0), alpha=-0.1)
    assert model.weight.item() == expected.item()


def test_the_shared_model_ddp_step_ends_without_a_deadlock_at_exit():
    # freeing the DDP model right after destroy_process_group() hung now and then on a loaded machine
    # (a gloo thread waits for the GIL that the freeing thread holds); the worker's teardown() pauses first
    assert "teardown()" in inspect.getsource(ddp_step_shared_model)
    for _ in range(5):
        model = torch.nn.Linear(1, 1, bias=False)
        context = mp.start_processes(ddp_step_shared_model, args=(2, f"tcp://127.0.0.1:{free_port()}", model),
                                     nprocs=2, join=False, start_method="forkserver")
        try:
            deadline = time.monotonic() + 120
            while not context.join(timeout=5):  # False while a rank still runs
                assert time.monotonic() < deadline, "a rank did not exit"
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.terminate()


def test_results_come_back_from_ddp_lib_not_from_torch():
    assert mp.start_processes(hello, args=(2,), nprocs=2, start_method="forkserver") is None
    assert run_ranks(hello, 3) == ["hello from rank 0 of 3", "hello from rank 1 of 3", "hello from rank 2 of 3"]


def test_worker_prints_are_captured_per_rank(capsys):
    run = launch(chatty, 2, args=(2,), show_output=False)
    assert run.results == [2, 2]
    assert run.stdout == [f"rank {r} of 2: line 0\nrank {r} of 2: line 1\n" for r in range(2)]
    assert capsys.readouterr().out == ""
    run_ranks(chatty, 2, args=(1,))
    assert capsys.readouterr().out == "[rank 0] rank 0 of 2: line 0\n[rank 1] rank 1 of 2: line 0\n"


def test_capture_stderr_takes_file_descriptor_2_and_restores_it():
    with capture_stderr() as err:
        os.write(2, b"from fd 2\n")
        print("from sys.stderr", file=sys.stderr)
    assert err.text.splitlines() == ["from fd 2", "from sys.stderr"]
    assert os.fstat(2)  # still open after the block


def test_fork_copies_a_held_lock_but_not_its_thread():
    assert fork_while_lock_held(wait=0.2) == {"child took the lock": False, "parent took the lock": True}


def test_fork_after_a_single_threaded_pool_is_fine():
    assert fork_after_threads(threads=1, wait=30) == "finished on 1 thread"


def test_fork_after_threads_waits_for_a_child_that_still_computes():
    # wait=0: the child is still starting at the deadline; it uses CPU, so it is not called hung.
    assert fork_after_threads(threads=1, wait=0.0) == "finished on 1 thread"


def test_cpu_ticks_reads_proc_and_is_none_for_no_process():
    if not sys.platform.startswith("linux"):
        pytest.skip("reads Linux's /proc")
    assert _cpu_ticks(os.getpid()) >= 0
    assert _cpu_ticks(2**22 + 1) is None  # above Linux's largest pid


def test_short_paths_keeps_a_package_file_from_its_package_and_any_other_by_name():
    text = ('  File "/x/.venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 87, in _wrap\n'
            '  File "/home/me/repo/ddp_lib/workers/spawning.py", line 75, in fail_on_rank\n'
            'ValueError: rank 1 of 2 was told to fail\n')
    assert short_paths(text) == ('  File "torch/multiprocessing/spawn.py", line 87, in _wrap\n'
                                 '  File "spawning.py", line 75, in fail_on_rank\n'
                                 'ValueError: rank 1 of 2 was told to fail\n')


def _run(returncode: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["python", "ddp_basic.py"], returncode, stdout, stderr)


DONE = "parameter checksum on each after one step"


def test_exit_verdict_tells_the_abort_at_exit_from_a_real_failure():
    printed = f"group of 2 processes ready\n2 ranks, {DONE}: [1.0, 1.0]\n"
    assert exit_verdict(_run(0, printed), DONE) == "exit code 0: the job succeeded"
    spawn_abort = ("terminate called without an active exception\n"
                   "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGABRT\n")
    torchrun_abort = ("  exitcode  : -6 (pid: 4242)\n  traceback : Signal 6 (SIGABRT) received by PID 4242\n"
                      "========================================================\n")
    for stderr in (spawn_abort, torchrun_abort):
        assert "torch's abort at exit" in exit_verdict(_run(1, printed, stderr), DONE)
    # Not every line out, or another error: a real failure, with the last line of stderr.
    assert exit_verdict(_run(1, "group of 2 processes ready\n", spawn_abort), DONE).startswith(
        "exit code 1: a real failure; the last line of its error output: torch.multiprocessing")
    assert exit_verdict(_run(1, printed, "ValueError: boom\n"), DONE).endswith("ValueError: boom")


def test_a_large_put_waits_for_the_parent_to_read_before_the_ranks_can_finish():
    results = mp.get_context("forkserver").SimpleQueue()
    context = mp.start_processes(bytes_to_queue, args=(1_000_000, results), nprocs=2, join=False,
                                 start_method="forkserver")
    assert context.join(timeout=1.0) is False  # both wait in their put: nobody reads yet
    sizes = sorted((rank, len(value)) for rank, value in (results.get() for _ in range(2)))
    while not context.join():
        pass
    assert sizes == [(0, 1_000_000), (1, 1_000_000)]
    assert [process.exitcode for process in context.processes] == [0, 0]


def test_time_start_methods_and_table():
    times = time_start_methods(noop, nprocs=2, repeats={"forkserver": 2, "fork": 1})
    assert {m: len(t) for m, t in times.items()} == {"forkserver": 2, "fork": 1}
    assert all(t > 0 for ts in times.values() for t in ts)
    table = start_time_table(times).splitlines()
    assert table[0].split() == ["start", "method", "launches", "median", "s"]
    assert [row.split()[:2] for row in table[1:]] == [["forkserver", "2"], ["fork", "1"]]


def test_start_time_table_says_what_each_method_was_measured_on():
    times = {"spawn": [1.5], "forkserver": [0.04, 0.05, 0.06], "fork": [0.03]}
    table = start_time_table(times, measured={"spawn": "record_args, section 1", "forkserver": "noop"})
    rows = table.splitlines()
    assert rows[0].endswith("measured on")
    assert rows[1].split() == ["spawn", "1", "1.500", "record_args,", "section", "1"]
    assert rows[2].split() == ["forkserver", "3", "0.050", "noop"]
    assert rows[3].split() == ["fork", "1", "0.030", "-"]  # a method not named
    assert "measured on" not in start_time_table(times)  # without it, the table is as before


def test_start_time_table_widens_for_a_long_row_name():
    times = {"spawn": [1.5], "forkserver": [0.04], "forkserver, first start": [2.0]}
    rows = start_time_table(times, measured={"forkserver, first start": "setup cell"}).splitlines()
    medians_end = [rows[1].index("1.500"), rows[2].index("0.040"), rows[3].index("2.000")]
    assert len(set(medians_end)) == 1  # the medians line up under one another
    assert rows[3].split() == ["forkserver,", "first", "start", "1", "2.000", "setup", "cell"]


@pytest.mark.parametrize("name", ["hello", "describe_rank", "fail_on_rank", "chatty"])
def test_lesson_workers_are_runnable_by_name(name):
    assert callable(WORKERS[name].load())


def test_cli_reports_the_failing_rank(capsys):
    assert cli_main(["run", "fail_on_rank", "--world-size", "2", "--bad-rank", "0"]) == 1
    assert capsys.readouterr().err.strip().endswith("rank 0 raised ValueError: rank 0 of 2 was told to fail")


def test_errors_of_reads_each_message_whole_when_two_children_interleave_their_tracebacks():
    # Seen about once in 30 runs of raw mp.spawn on 2 cores: two children failing at once share fd 2.
    from ddp_lib.demos.spawning import Captured

    err = Captured()
    err.text = ("Traceback (most recent call last):\n"
                "AttributeError :  Can't get attribute 'hello' on <module '__main__' (built-in)>\n"
                "AttributeError: Can't get attribute 'hello' on <module '__main__' (built-in)>\n")
    whole = "AttributeError: Can't get attribute 'hello' on <module '__main__' (built-in)>"
    assert err.errors_of("AttributeError") == [whole]


def test_errors_of_ends_each_message_where_the_other_childs_traceback_starts_on_its_line():
    # The other child's traceback can follow the message on the same line: it is not part of the message.
    from ddp_lib.demos.spawning import Captured

    whole = "AttributeError: Can't get attribute 'hello' on <module '__main__' (built-in)>"
    for leaked in ('  File "<string>", line 1, in <module>', 'File "<string>", line 1, in <module>',
                   "Traceback (most recent call last):", "   "):
        err = Captured()
        err.text = f"Traceback (most recent call last):\n{whole}{leaked}\n{whole}\n"
        assert err.errors_of("AttributeError") == [whole], leaked
    err = Captured()
    err.text = "ValueError: a message with one space inside\n"
    assert err.errors_of("ValueError") == ["ValueError: a message with one space inside"]


def test_classic_changes_shows_what_lesson_02s_script_changed_from_lesson_00s_classic_example(tmp_path):
    from ddp_lib.demos.spawning import classic_changes

    lesson_02 = json.loads((NOTEBOOKS / "02_spawn.ipynb").read_text())
    script = next("".join(c["source"]) for c in lesson_02["cells"]
                  if "".join(c["source"]).startswith("%%writefile my_work/ddp_basic.py"))
    path = tmp_path / "ddp_basic.py"
    path.write_text(script.split("\n", 1)[1])
    diff = classic_changes(str(NOTEBOOKS / "00_start_here.ipynb"), str(path)).splitlines()
    assert diff[:2] == ["--- classic example", f"+++ {path}"]
    assert "-    os.environ['MASTER_PORT'] = '12355'" in diff  # the fixed port, gone
    assert "+if __name__ == '__main__':" in diff  # the guard, added
    assert "-    model = ToyModel().to(rank)" in diff
    # a line only moved (into train_step) or re-indented is not a change
    assert not any(line[1:].strip() == "optimizer.step()" for line in diff if line[:1] in "+-")
    assert not any(line[1:].strip() == "cleanup()" for line in diff if line[:1] in "+-")
    # the training body is train_step's, which returns before demo_basic's cleanup(): the model is freed first
    assert "+def train_step(rank, world_size, device):" in diff
    assert "+        checksums = train_step(rank, world_size, device)" in diff
    assert diff.index("+        checksums = train_step(rank, world_size, device)") < diff.index("+    finally:")


def test_capture_stderr_records_torch_spawn_messages_without_printing_them():
    import logging

    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    handlers, propagate = list(spawn_log.handlers), spawn_log.propagate
    with capture_stderr() as err:
        spawn_log.warning("Terminating process %s via signal SIGTERM", 12345)
    assert err.torch_log == ["Terminating process 12345 via signal SIGTERM"]
    assert "Terminating" not in err.text
    assert spawn_log.handlers == handlers and spawn_log.propagate == propagate



def test_abort_at_exit_table_reads_the_kept_series(tmp_path):
    """Lesson 02's table of aborts at exit comes from the kept JSON, labelled as recorded."""
    from ddp_lib.demos.spawning import abort_at_exit_table

    lines = abort_at_exit_table()
    assert lines[0] == "recorded series, not run in this notebook:"
    assert any("5 of 145 aborted" in line and "0 of 144 aborted" in line for line in lines)
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({"series": [{"series": "s", "without leave()": [1, 2], "with leave()": None,
                                            "torch": "t", "python": "p"}]}))
    assert abort_at_exit_table(kept)[2].split() == ["s", "1", "of", "2", "aborted", "not", "run", "not", "kept",
                                                    "torch", "t,", "Python", "p"]
    kept.write_text(json.dumps({"series": [{"series": "s", "runs": 10, "without leave()": [1, 8],
                                            "with leave()": [0, 9], "torch": "t", "python": "p"}]}))
    row = abort_at_exit_table(kept)[2]
    assert "2 without, 1 with" in row  # launched minus counted: the runs that failed otherwise
    assert "failed otherwise" in abort_at_exit_table(kept)[1]


def test_gloo_shutdown_table_reads_the_kept_series(tmp_path):
    """Lesson 02's table of hangs at the end comes from the kept JSON, labelled as recorded."""
    from ddp_lib.demos.spawning import gloo_shutdown_table

    lines = gloo_shutdown_table()
    assert lines[0] == "recorded series, not run in this notebook:"
    assert lines[1].split()[1:4] == ["destroy-return", "barrier-destroy-return", "return-destroy"]
    assert any("7 of 30 hung" in line and "0 of 200 hung" in line for line in lines)
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({"endings": ["a", "b"], "series": [{"series": "s", "a": [1, 2], "b": None,
                                                                  "torch": "t"}]}))
    assert gloo_shutdown_table(kept)[2].split() == ["s", "1", "of", "2", "hung", "not", "run", "torch", "t"]


def test_checksums_by_stage_reads_the_scripts_lines():
    printed = ("group of 2 processes ready (gloo on cpu), training one step\n"
               "2 ranks, parameter checksum on each before DDP(...): [1.5, -0.25]\n"
               "2 ranks, parameter checksum on each right after DDP(...): [1.5, 1.5]\n"
               "2 ranks, parameter checksum on each after one step: [1.4, 1.4]\n")
    assert checksums_by_stage(printed) == {"before DDP(...)": [1.5, -0.25], "right after DDP(...)": [1.5, 1.5],
                                           "after one step": [1.4, 1.4]}


def test_fork_hang_demo_says_restart_when_the_control_hangs(monkeypatch):
    """A control that hangs gives no baseline: the lines say to restart the kernel, and no second child runs."""
    from ddp_lib.demos import spawning as demo

    calls = []
    monkeypatch.setattr(demo, "parent_has_computed", lambda: False)
    monkeypatch.setattr(demo, "fork_after_threads", lambda **kwargs: calls.append(kwargs) or "hung")
    lines = demo.fork_hang_demo(threads=2)
    assert lines[-1] == "the control hung too: restart the kernel, then rerun this cell"
    assert len(calls) == 1 and calls[0]["parent_computes"] is False


def test_fork_hang_demo_in_a_fresh_process():
    """Real forks, in a fresh Python whose thread pool has not started: on 1 thread both children
    finish; a second call knows the control is void."""
    code = ("from ddp_lib.demos.spawning import fork_hang_demo\n"
            "print(repr(fork_hang_demo(threads=1)))\nprint(repr(fork_hang_demo(threads=1)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    first, second = (eval(line) for line in done.stdout.splitlines())  # noqa: S307 (our own repr)
    assert first[0].startswith("control, the parent has computed nothing:   child finished on 1 thread, in ")
    assert first[1].startswith("the parent has computed on 1 threads first: child finished on 1 thread (given ")
    assert first[2] == "the second child finished: this OpenMP runtime survived the fork"
    assert second == ["this comparison has run in this process before: restart the kernel to rerun it"]
