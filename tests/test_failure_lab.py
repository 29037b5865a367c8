"""The failures lesson 07 shows, reproduced with real processes, and its exercise checker."""

import inspect
import os
import socket
import sysconfig
import textwrap
import time

import pytest
import torch.distributed as dist

import ddp_lib
from ddp_lib.demos import failure_reading, hung_ranks, leftovers
from ddp_lib.errors import LaunchInputError, Stopped, WorkerError, readable, stopped_at
from ddp_lib.exercises.lesson07 import check_evaluation
from ddp_lib.launch import run_ranks
from ddp_lib.torchrun import torchrun_command
from ddp_lib.workers import failure_lab as lab
from ddp_lib.workers import faulty_ranks


def test_the_launcher_stops_the_ranks_still_busy_when_one_raises(tmp_path):
    started = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_ranks(faulty_ranks.raise_on_rank, 3, kwargs=dict(bad_rank=2, pid_dir=str(tmp_path), others_busy_s=60),
                  show_output=False)
    assert info.value.rank == 2 and info.value.exc_type == "ValueError"
    assert len(list(tmp_path.glob("rank*.pid"))) == 3 and leftovers.still_running(str(tmp_path)) == []
    assert time.monotonic() - started < 30  # stopped, not left to finish their 60 s


def test_a_rank_killed_by_sigkill_under_mp_spawn_is_named_by_its_signal():
    import torch.multiprocessing as mp

    started = time.monotonic()
    with pytest.raises(mp.ProcessExitedException, match="process 1 terminated with signal SIGKILL"):
        mp.spawn(faulty_ranks.kill_on_rank, args=(2, 1, 60), nprocs=2)
    assert time.monotonic() - started < 30  # the sleeping rank was stopped, not left to finish its 60 s


def test_a_collective_only_rank_0_calls_times_out_within_seconds():
    with pytest.raises(WorkerError, match="Timed out waiting 3000ms"):
        run_ranks(lab.evaluate_on_rank0_only, 2, timeout=60, show_output=False)


def test_every_rank_evaluating_is_the_fix():
    assert run_ranks(lab.evaluate_on_rank0_only, 2, kwargs=dict(fixed=True), show_output=False) == [3.0, 3.0]


def test_the_rank_with_the_stray_collective_fails_with_a_lost_connection_when_its_peers_time_out_first():
    with pytest.raises(WorkerError) as caught:
        run_ranks(lab.stray_after_peers_wait, 2, timeout=60, show_output=False)
    failures = caught.value.failures
    assert "Timed out waiting 3000ms for recv" in failures[1]
    assert failure_reading.is_connection_error(failures[0]), failures[0]
    assert failure_reading.innermost_own_call(caught.value.tracebacks[0]).startswith(
        "stray_after_peers_wait: dist.all_reduce(metric)")


def test_a_metric_all_reduce_on_rank_0_alone_in_a_ddp_loop_meets_ddps_gradient_all_reduce_and_hangs():
    with pytest.raises(WorkerError) as plain:
        run_ranks(lab.metric_on_rank0_in_ddp_loop, 2, timeout=60, show_output=False)
    assert sorted(plain.value.failures) == [0, 1]
    # one rank times out; the other by its own timeout, or as the first one's connections close
    assert any("Timed out waiting 3000ms for recv" in m for m in plain.value.failures.values())
    assert not any("metric" in out for out, _ in plain.value.outputs.values())  # rank 0 never got its sum


def test_ddp_on_a_debug_detail_process_group_dies_in_its_constructor_on_this_torch():
    # torch 2.13 (CPU build): DDP's logger segfaults on the ProcessGroupWrapper that DETAIL adds.
    # Lesson 07 says so; if a later torch fixes it, this test fails and the lesson must change.
    with pytest.raises(WorkerError) as detail:
        run_ranks(lab.metric_on_rank0_in_ddp_loop, 2, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, timeout=60,
                  show_output=False)
    assert "SIGSEGV" in str(detail.value.failures)


def test_ddp_on_a_group_created_with_the_level_off_runs_and_the_checked_default_group_names_the_missing_rank():
    with pytest.raises(WorkerError) as caught:
        run_ranks(lab.metric_on_rank0_with_checked_group, 2, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, timeout=60,
                  show_output=False)
    printed = caught.value.outputs[0][0]
    assert "the default group checked: True, DDP's group checked: False" in printed
    assert "Ranks 1 failed to pass monitoredBarrier" in caught.value.failures[0]


def test_mismatched_shapes_are_silent_on_one_rank_and_named_with_debug_detail():
    with pytest.raises(WorkerError) as plain:
        run_ranks(lab.mismatched_shapes, 2, show_output=False)
    assert plain.value.rank == 1 and "Connection closed by peer" in plain.value.message
    assert 0 not in plain.value.failures  # rank 0 "succeeded" with a wrong sum
    assert "[11.0, 22.0]" in plain.value.outputs[0][0]  # its [1, 2] plus the first two of [10, 20, 30]
    with pytest.raises(WorkerError, match="Detected mismatch between collectives") as detail:
        run_ranks(lab.mismatched_shapes, 2, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, show_output=False)
    assert "TensorShape=[2]" in str(detail.value.failures) and "TensorShape=[3]" in str(detail.value.failures)
    assert run_ranks(lab.mismatched_shapes, 2, kwargs=dict(fixed=True), show_output=False) == [[11.0, 22.0]] * 2


def test_mismatched_shapes_with_the_longer_tensor_on_rank_0_give_rank_1_wrong_numbers_silently():
    with pytest.raises(WorkerError) as plain:
        run_ranks(lab.mismatched_shapes, 2, kwargs=dict(longer_on_rank0=True), show_output=False)
    assert sorted(plain.value.failures) == [0]  # rank 1 "succeeded"
    assert "[3.0, 11.0]" in plain.value.outputs[1][0]  # not [11.0, 22.0]: its pieces met rank 0's out of place


def test_an_unused_parameter_fails_the_second_step_until_find_unused_parameters():
    with pytest.raises(WorkerError, match="Expected to have finished reduction in the prior iteration"):
        run_ranks(lab.unused_parameter, 2, show_output=False)
    losses = run_ranks(lab.unused_parameter, 2, (True,), show_output=False)
    assert losses[0] == losses[1] and len(losses[0]) == 2


def test_an_unused_parameter_leaves_even_the_used_gradients_unaveraged_after_the_first_backward():
    plain = run_ranks(lab.unused_parameter_first_gradients, 2, show_output=False)
    assert plain[0] != plain[1]  # no error yet, but the replicas would diverge at optimizer.step()
    found = run_ranks(lab.unused_parameter_first_gradients, 2, (True,), show_output=False)
    assert found[0] == found[1]


def test_a_timeout_shorter_than_a_slow_save_fails_a_healthy_job():
    with pytest.raises(WorkerError) as short:
        run_ranks(lab.slow_rank0_then_barrier, 2, kwargs=dict(timeout_s=1.0, save_s=2.0), show_output=False)
    assert 1 in short.value.failures  # rank 1 waited in the barrier past its timeout
    assert run_ranks(lab.slow_rank0_then_barrier, 2, kwargs=dict(timeout_s=5.0, save_s=2.0),
                     show_output=False) == ["passed", "passed"]


def test_device_ids_with_a_cpu_model_is_a_value_error():
    with pytest.raises(WorkerError) as info:
        run_ranks(lab.device_ids_on_cpu, 2, show_output=False)
    assert info.value.exc_type == "ValueError" and "device_ids" in info.value.message


def test_without_set_epoch_every_epoch_has_the_same_order():
    same = run_ranks(lab.sampler_orders, 2, (False,), show_output=False)
    assert all(epochs[0] == epochs[1] == epochs[2] for epochs in same)
    fixed = run_ranks(lab.sampler_orders, 2, (True,), show_output=False)
    assert all(epochs[0] != epochs[1] for epochs in fixed)
    # Each epoch, the ranks together still see every sample exactly once.
    for epoch in range(3):
        assert sorted(fixed[0][epoch] + fixed[1][epoch]) == list(range(8))


def test_debug_detail_adds_a_monitored_barrier_and_two_all_gathers_to_each_collective():
    off, detail = (run_ranks(lab.gloo_calls_per_all_reduce, 3, env={"TORCH_DISTRIBUTED_DEBUG": level},
                             show_output=False)
                   for level in ("OFF", "DETAIL"))
    assert off == [{"all_reduce": 1.0}] * 3
    # rank 0 hears from each other rank, then answers each; the others send once and receive once
    assert detail == [{"all_gather": 2.0, "all_reduce": 1.0, "recv": 2.0, "send": 2.0}] + \
        [{"all_gather": 2.0, "all_reduce": 1.0, "recv": 1.0, "send": 1.0}] * 2


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads /proc/net")
def test_a_store_given_127_0_0_1_listens_everywhere_and_one_handed_a_loopback_socket_does_not():
    plain = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held = dist.TCPStore("127.0.0.1", listener.getsockname()[1], is_master=True, wait_for_workers=False,
                         master_listen_fd=listener.fileno())
    listener.detach()
    assert lab.listening_addresses(plain.port) == ["*"]
    assert lab.listening_addresses(held.port) == ["127.0.0.1"]
    del plain, held


def test_readable_drops_source_locations_and_peer_ports():
    text = "[/a/b/pair.cc:553] Connection closed by peer [127.0.0.1]:43236. This is typically"
    assert readable(text) == "Connection closed by peer [127.0.0.1]:PORT. This is typically"
    assert readable(text, limit=30) == "Connection closed by peer ..."


def test_args_that_is_not_a_tuple_never_starts_a_process():
    with pytest.raises(LaunchInputError, match="args=\\(2,\\)"):
        run_ranks(lab.sampler_orders, 2, args=(2))


SOLUTIONS = {
    "right": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric)
            return metric.item() / world_size
    """,
    "all_gather_then_mean": """
        with process_group(rank, world_size):
            every = [None] * world_size
            dist.all_gather_object(every, metric)
            return sum(every) / world_size
    """,
    "one_element_tensor": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric, op=ReduceOp.AVG)
            return metric
    """,
    "own_metric_as_tensor": """
        return torch.tensor([metric])
    """,
    "rank0_only": """
        with process_group(rank, world_size, timeout=timedelta(seconds=60)):
            metric = torch.tensor([metric])
            if rank == 0:
                dist.all_reduce(metric)
            return metric.item() / world_size
    """,
    "others_busy": """
        with process_group(rank, world_size, timeout=timedelta(seconds=60)):
            metric = torch.tensor([metric])
            if rank == 0:
                dist.all_reduce(metric)
            else:
                import time; time.sleep(60)
            return metric.item() / world_size
    """,
    "slow": """
        import time; time.sleep(60)
    """,
    "sum_not_mean": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric)
            return metric.item()
    """,
    "hard_coded_two": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric)
            return metric.item() / 2
    """,
    "own_metric_only": """
        return metric
    """,
}


@pytest.fixture
def solution(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))

    def load(key):
        name = f"evaluation_{key}"
        body = textwrap.indent(textwrap.dedent(SOLUTIONS[key]).strip(), "    ")
        (tmp_path / f"{name}.py").write_text(
            "from datetime import timedelta\nimport torch\nimport torch.distributed as dist\n"
            "from torch.distributed import ReduceOp, distributed_c10d\n"
            "from ddp_lib.process_group import process_group\n\n"
            f"def evaluate(rank, world_size, metric):\n{body}\n")
        return __import__(name).evaluate

    return load


@pytest.mark.parametrize("key", ["all_gather_then_mean", "one_element_tensor"])
def test_checker_passes_right_evaluations_however_written(solution, key):
    report = check_evaluation(solution(key), world_sizes=(2, 3))
    assert report.passed, report
    assert all(line.startswith("PASS world_size") for line in report.lines)


@pytest.mark.parametrize("key", ["own_metric_only", "own_metric_as_tensor"])
def test_checker_refuses_answers_without_a_collective(solution, key):
    report = check_evaluation(solution(key), world_sizes=(2,))
    (line,) = report.lines
    assert not report.passed and "ran no collective" in line








def test_checker_refuses_a_hard_coded_world_size(solution):
    report = check_evaluation(solution("hard_coded_two"), world_sizes=(2, 3))
    assert [line[:4] for line in report.lines] == ["PASS", "FAIL"]


def test_checker_turns_a_hang_into_a_useful_failure(solution):
    evaluate = solution("others_busy")
    report = check_evaluation(evaluate, world_sizes=(2,), timeout=5)
    source = inspect.getsource(inspect.getmodule(evaluate)).splitlines()
    line_of = {text: next(n for n, line in enumerate(source, 1) if text in line) for text in ("all_reduce", "sleep")}
    assert not report.passed
    assert report.lines == ["FAIL world_size 2: rank(s) 0, 1 still running after 5 s. "
                            "rank 0 was in all_reduce (torch/distributed/distributed_c10d.py), called at "
                            f"evaluation_others_busy.py line {line_of['all_reduce']}; "
                            f"rank 1 was at evaluation_others_busy.py line {line_of['sleep']}. "
                            "A rank waits in a collective that another rank never called: does every rank call the "
                            "same collectives, in the same order?"]


def test_checker_says_when_no_rank_waits_in_a_collective(solution):
    report = check_evaluation(solution("slow"), world_sizes=(2,), timeout=5)
    (line,) = report.lines
    assert line.startswith("FAIL world_size 2: rank(s) 0, 1 still running"), line
    assert "rank 0 was at evaluation_slow.py line" in line
    assert line.endswith("No rank was in torch.distributed: does the work take longer than the deadline?")


def _stack(*frames: tuple[str, int, str], main: bool = True) -> list[dict]:
    """A rank's threads as it writes them when asked (ddp_lib.launch._stacks), frames innermost first."""
    watcher = {"name": "ddp_lib-stacks", "main": False, "frames": [["/x/ddp_lib/launch/_stacks.py", 50, "serve"]]}
    return [{"name": "MainThread", "main": main, "frames": [list(f) for f in frames]}, watcher]


TORCH = os.path.join(sysconfig.get_paths()["purelib"], "torch")
CHILD = os.path.join(os.path.dirname(ddp_lib.__file__), "launch", "_child.py")
PROCESS_GROUP = os.path.join(os.path.dirname(ddp_lib.__file__), "process_group.py")


def test_where_a_rank_stopped_outside_its_worker():
    # A rank can hang after its worker returned (in a library's teardown, say): its stack has no
    # worker frame, and the place named is the call it was in.
    stack = _stack((f"{TORCH}/distributed/distributed_c10d.py", 2, "destroy_process_group"), (CHILD, 260, "run_rank"))
    place = stopped_at(stack)
    assert place.call == "destroy_process_group (torch/distributed/distributed_c10d.py)" and place.line == ""
    assert place.outside_worker and place.communicating
    assert stopped_at([]) == stopped_at("garbage") == Stopped()


def test_where_a_rank_stopped_names_the_learners_line_and_ddps_waits():
    # Inside DDP's constructor, called from ddp_lib's process_group helper, called from the learner's file.
    stack = _stack((f"{TORCH}/nn/parallel/distributed.py", 2360, "_distributed_broadcast_coalesced"),
                   (PROCESS_GROUP, 190, "wrap_ddp"), ("/home/me/my_work/answer.py", 7, "one_step"),
                   (CHILD, 183, "_call_keeping_locals"), (CHILD, 252, "run_rank"))
    place = stopped_at(stack)
    assert place == Stopped("_distributed_broadcast_coalesced (torch/nn/parallel/distributed.py)", "answer.py line 7",
                            communicating=True)
    # torch installed elsewhere than this environment's site-packages (a distribution's dist-packages)
    elsewhere = [{**thread, "frames": [[path.replace(TORCH, "/usr/lib/python3/dist-packages/torch"), line, name]
                                       for path, line, name in thread["frames"]]} for thread in stack]
    assert stopped_at(elsewhere).call == "_distributed_broadcast_coalesced (torch/nn/parallel/distributed.py)"
    # a learner's own slow loop: not communicating
    busy = _stack(("/home/me/my_work/answer.py", 9, "one_step"), (CHILD, 183, "_call_keeping_locals"))
    assert stopped_at(busy) == Stopped("", "answer.py line 9")


def test_checker_explains_a_broken_collective(solution):
    (line,) = check_evaluation(solution("rank0_only"), world_sizes=(2,)).lines
    assert line.startswith("FAIL world_size 2: rank 0")
    assert line.endswith("does every rank call the same collectives, in the same order?")


def test_checker_names_a_wrong_value(solution):
    (line,) = check_evaluation(solution("sum_not_mean"), world_sizes=(2,)).lines
    assert line.startswith("FAIL world_size 2, metrics [") and "rank 0 returned" in line
    assert "expected the mean" in line


def test_checker_draws_new_metrics_each_time(solution):
    # A worker that returns a number copied from an earlier run cannot pass twice.
    a, b = (check_evaluation(solution("right"), world_sizes=(2, 3)).lines for _ in range(2))
    assert all(line.startswith("PASS") for line in a + b) and a != b


def test_a_rank_killed_in_a_collective_is_noticed_by_every_survivor_within_the_timeout(tmp_path):
    with pytest.raises(WorkerError) as info:
        run_ranks(faulty_ranks.die_in_collective, 3, kwargs=dict(record_dir=str(tmp_path), timeout_s=3.0),
                  show_output=False)
    assert info.value.rank == 1
    records = faulty_ranks.read_records(str(tmp_path))
    died_at = records.pop(1)["died_at"]
    assert sorted(records) == [0, 2]
    assert all(0 <= r["failed_at"] - died_at < 5.0 for r in records.values())


def test_stack_dumps_are_read_in_the_order_written_each_without_the_lines_after_it():
    stderr = ("I1207 torchrun log line\n"
              "Current thread 0x00007f01 (most recent call first):\n"
              '  File "/x/distributed_c10d.py", line 3 in all_reduce\n'
              '  File "/x/torchrun_failures.py", line 38 in main\n'
              "rank 0 printed this\n"
              '  File "/x/other.py", line 1, in not_a_dump\n'
              "Current thread 0x00007f02 (most recent call first):\n"
              '  File "/x/torchrun_failures.py", line 39 in main\n')
    assert hung_ranks.stack_dumps(stderr) == [
        'Current thread 0x00007f01 (most recent call first):\n  File "/x/distributed_c10d.py", line 3 in all_reduce\n'
        '  File "/x/torchrun_failures.py", line 38 in main',
        'Current thread 0x00007f02 (most recent call first):\n  File "/x/torchrun_failures.py", line 39 in main']


def test_a_torchrun_crash_is_read_from_the_error_files():
    # The crash demo of lesson 07 under real torchrun: rank 1 raises. (Lesson 07's hang cell, compared
    # by nbval, checks the stacks the ranks dump while they wait.)
    crash = hung_ranks.run_and_dump_stacks(
        torchrun_command(["-m", "ddp_lib.demos.torchrun_failures", "crash"], nproc_per_node=2), world_size=2)
    assert crash.returncode == 1
    assert set(crash.errors) == {1} and crash.errors[1]["message"] == "ValueError: rank 1 read a corrupt batch"
    assert hung_ranks.root_cause_lines(crash.errors, 2) == [
        "root cause (earliest error file): rank 1, ValueError: rank 1 read a corrupt batch",
        "rank 0: no error file (it did not raise)"]
    assert hung_ranks.root_cause_lines({}, 2) == ["no error file: no rank raised"]
