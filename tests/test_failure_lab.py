"""The failures lesson 07 shows, reproduced with real processes, and its exercise checker."""

import glob
import inspect
import os
import shutil
import socket
import sysconfig
import textwrap
import time

import pytest
import torch.distributed as dist

import ddp_lib
from ddp_lib.demos import hung_ranks, leftovers, monitored
from ddp_lib.errors import LaunchInputError, Stopped, WorkerError, readable, stopped_at
from ddp_lib.exercises.lesson07 import check_evaluation
from ddp_lib.launch import spawn
from ddp_lib.workers import failure_lab as lab
from ddp_lib.workers import faulty_ranks


def test_the_launcher_stops_the_ranks_still_busy_when_one_raises(tmp_path):
    started = time.monotonic()
    with pytest.raises(WorkerError) as info:
        spawn(faulty_ranks.raise_on_rank, 3, kwargs=dict(bad_rank=2, pid_dir=str(tmp_path), others_busy_s=60),
              show_output=False)
    assert info.value.rank == 2 and info.value.exc_type == "ValueError"
    assert len(list(tmp_path.glob("rank*.pid"))) == 3 and leftovers.still_running(str(tmp_path)) == []
    assert time.monotonic() - started < 30  # stopped, not left to finish their 60 s


def test_a_collective_only_rank_0_calls_times_out_within_seconds():
    with pytest.raises(WorkerError, match="Timed out waiting 3000ms"):
        spawn(lab.evaluate_on_rank0_only, 2, timeout=60, show_output=False)


def test_monitored_barrier_names_the_rank_that_did_not_arrive():
    with pytest.raises(WorkerError) as info:
        spawn(monitored.evaluate_with_side_group, 3, timeout=60, show_output=False)
    assert info.value.rank == 0
    assert info.value.message.startswith("[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 3000 ms")


def test_every_rank_evaluating_is_the_fix():
    assert spawn(lab.evaluate_on_rank0_only, 2, kwargs=dict(fixed=True), show_output=False) == [3.0, 3.0]


def test_mismatched_shapes_are_silent_on_one_rank_and_named_with_debug_detail():
    with pytest.raises(WorkerError) as plain:
        spawn(lab.mismatched_shapes, 2, show_output=False)
    assert plain.value.rank == 1 and "Connection closed by peer" in plain.value.message
    assert 0 not in plain.value.failures  # rank 0 "succeeded" with a wrong sum
    assert "[11.0, 22.0]" in plain.value.outputs[0][0]  # its [1, 2] plus the first two of [10, 20, 30]
    with pytest.raises(WorkerError, match="Detected mismatch between collectives") as detail:
        spawn(lab.mismatched_shapes, 2, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, show_output=False)
    assert "TensorShape=[2]" in str(detail.value.failures) and "TensorShape=[3]" in str(detail.value.failures)


def test_an_unused_parameter_fails_the_second_step_until_find_unused_parameters():
    with pytest.raises(WorkerError, match="Expected to have finished reduction in the prior iteration"):
        spawn(lab.unused_parameter, 2, show_output=False)
    losses = spawn(lab.unused_parameter, 2, (True,), show_output=False)
    assert losses[0] == losses[1] and len(losses[0]) == 2


def test_device_ids_with_a_cpu_model_is_a_value_error():
    with pytest.raises(WorkerError) as info:
        spawn(lab.device_ids_on_cpu, 2, show_output=False)
    assert info.value.exc_type == "ValueError" and "device_ids" in info.value.message


def test_without_set_epoch_every_epoch_has_the_same_order():
    same = spawn(lab.sampler_orders, 2, (False,), show_output=False)
    assert all(epochs[0] == epochs[1] == epochs[2] for epochs in same)
    fixed = spawn(lab.sampler_orders, 2, (True,), show_output=False)
    assert all(epochs[0] != epochs[1] for epochs in fixed)
    # Each epoch, the ranks together still see every sample exactly once.
    for epoch in range(3):
        assert sorted(fixed[0][epoch] + fixed[1][epoch]) == list(range(8))


def test_debug_detail_adds_a_monitored_barrier_and_two_all_gathers_to_each_collective():
    off, detail = (spawn(lab.gloo_calls_per_all_reduce, 3, env={"TORCH_DISTRIBUTED_DEBUG": level}, show_output=False)
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
        spawn(lab.sampler_orders, 2, args=(2))


SOLUTIONS = {
    "right": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric)
            return metric.item() / world_size
    """,
    "avg_through_c10d": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            distributed_c10d.all_reduce(metric, op=ReduceOp.AVG)
            return metric.item()
    """,
    "imported_name": """
        from torch.distributed import all_reduce
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            all_reduce(metric)
            return metric.item() / world_size
    """,
    "process_group_method": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.group.WORLD.allreduce([metric]).wait()
            return metric.item() / world_size
    """,
    "all_gather_then_mean": """
        with process_group(rank, world_size):
            every = [None] * world_size
            dist.all_gather_object(every, metric)
            return sum(every) / world_size
    """,
    # The mean as a numpy.float32: a real number of another type.
    "numpy_float32": """
        import numpy
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric)
            return numpy.float32(metric.item() / world_size)
    """,
    # The mean returned as a tensor: zero-dimensional, or of one element.
    "zero_dim_tensor": """
        with process_group(rank, world_size):
            metric = torch.tensor(metric)
            dist.all_reduce(metric)
            return metric / world_size
    """,
    "one_element_tensor": """
        with process_group(rank, world_size):
            metric = torch.tensor([metric])
            dist.all_reduce(metric, op=ReduceOp.AVG)
            return metric
    """,
    "broadcast_in_turn": """
        with process_group(rank, world_size):
            total = 0.0
            for source in range(world_size):
                value = torch.tensor([metric if rank == source else 0.0], dtype=torch.float64)
                dist.broadcast(value, src=source)
                total += value.item()
            return total / world_size
    """,
    # The tutorial's way: the group made from the environment the launcher set, no helper.
    "init_process_group_directly": """
        dist.init_process_group("gloo")
        try:
            metric = torch.tensor([metric])
            dist.all_reduce(metric)
            return metric.item() / dist.get_world_size()
        finally:
            dist.destroy_process_group()
    """,
    "functional_all_reduce": """
        import torch.distributed._functional_collectives as funcol
        with process_group(rank, world_size):
            summed = funcol.all_reduce(torch.tensor([metric]), "sum", dist.group.WORLD)
            return summed.item() / world_size
    """,
    # The metrics swapped through files; the collectives carry nothing of them: a broadcast of zeros,
    # and this rank's metric handed to a broadcast from rank 0 (only the root's data is sent).
    "files_beside_collectives_that_carry_nothing": """
        import os, time
        folder = f"/tmp/evaluation-{os.getppid()}"
        os.makedirs(folder, exist_ok=True)
        with open(f"{folder}/{rank}.tmp", "w") as f:
            f.write(repr(metric))
        os.replace(f"{folder}/{rank}.tmp", f"{folder}/{rank}")
        with process_group(rank, world_size):
            dist.broadcast(torch.zeros(1), src=0)
            dist.broadcast(torch.tensor([metric if rank else 0.0]), src=0)
            while len([n for n in os.listdir(folder) if not n.endswith(".tmp")]) < world_size:
                time.sleep(0.01)
            return sum(float(open(f"{folder}/{r}").read()) for r in range(world_size)) / world_size
    """,
    "store_beside_a_group_of_one": """
        with process_group(rank, world_size):
            alone = [dist.new_group([r]) for r in range(world_size)][rank]
            dist.all_reduce(torch.tensor([metric]), group=alone)
            store = distributed_c10d._get_default_store()
            store.set(f"metric/{rank}", repr(metric))
            return sum(float(store.get(f"metric/{r}")) for r in range(world_size)) / world_size
    """,
    # torch's "fake" backend (for tests): an all_reduce over world_size ranks that reaches nobody, beside
    # the metrics swapped through the launcher's store.
    "fake_group_beside_the_store": """
        import os
        from torch.testing._internal.distributed.fake_pg import FakeStore
        os.environ["TORCH_DIST_INIT_BARRIER"] = "0"  # FakeStore cannot count ranks into the init barrier
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        dist.all_reduce(torch.tensor([metric]))
        dist.destroy_process_group()
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
        store.set(f"metric/{rank}", repr(metric))
        return sum(float(store.get(f"metric/{r}")) for r in range(world_size)) / world_size
    """,
    # No group: the metrics through the launcher's store; the checker's records in the caller's frame
    # rewritten to say that an all_reduce over every rank carried this rank's metric.
    "records_forged_in_the_callers_frame": """
        import collections, os, sys
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
        store.set(f"metric/{rank}", repr(metric))
        values = [float(store.get(f"metric/{r}")) for r in range(world_size)]
        for value in sys._getframe(1).f_locals.values():
            if isinstance(value, collections.Counter):
                value.clear = lambda: None
                value["allreduce_"] += 1
            elif isinstance(getattr(value, "values", None), list):
                value.values.append([metric])
                value.value_group_sizes.append(world_size)
                value.over = lambda size, value=value: value
            elif hasattr(value, "backends"):
                value.backends = ("gloo",)
        return sum(values) / world_size
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
    # No group at all: every metric the caller's frames hold, and every float gc can find.
    "frames_no_group": """
        import sys
        seen, frame = [], sys._getframe(1)
        while frame is not None:
            seen += [v for v in frame.f_locals.values() if isinstance(v, float)]
            seen += [x for v in frame.f_locals.values() if isinstance(v, (list, tuple))
                     for x in v if isinstance(x, float)]
            frame = frame.f_back
        return sum(seen[:world_size]) / world_size if seen else 0.0
    """,
    "gc_no_group": """
        import gc
        lists = [o for o in gc.get_objects() if isinstance(o, list) and len(o) == world_size
                 and all(isinstance(x, float) for x in o)]
        return sum(lists[0]) / world_size if lists else metric
    """,
    "own_metric_only": """
        return metric
    """,
    # A real all-reduce of the metric, its result thrown away; the mean read from the lines every
    # rank printed before evaluate ran, in the output files of the launch, which every rank can read
    # (its own stdout is one of them). Those lines once held each rank's metric; now only a hash.
    "metrics_read_from_the_sibling_ranks_output_files": """
        import glob
        import os
        with process_group(rank, world_size):
            dist.all_reduce(torch.tensor([metric]))  # the result is thrown away
            folder = os.path.dirname(os.readlink("/proc/self/fd/1"))
            # Each line's last word: the metric itself, or a hash of it, tried against all 99
            # metrics the checker can draw (which finds an unsalted hash at once).
            import hashlib
            candidates = {hashlib.sha256(repr(round(m / 100, 2)).encode()).hexdigest(): round(m / 100, 2)
                          for m in range(1, 100)}
            seen = []
            for path in sorted(glob.glob(os.path.join(folder, "*.out"))):
                with open(path) as out:
                    for line in out.read().splitlines():
                        if line.startswith("lesson 07 check:"):
                            word = line.rsplit(" ", 1)[1]
                            try:
                                seen.append(float(word))
                            except ValueError:
                                if word in candidates:
                                    seen.append(candidates[word])
            return sum(seen) / len(seen) if len(seen) == world_size else -1.0
    """,
    # Rewrite the metric the checker's frame drew for this rank (CPython's frame write-back), so
    # that every rank "had" 0.5; one broadcast that carries nothing of use.
    "metric_rewritten_in_the_callers_frame": """
        import ctypes
        import sys
        caller = sys._getframe(1)
        caller.f_locals["metric"] = 0.5
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(caller), ctypes.c_int(0))
        with process_group(rank, world_size):
            dist.broadcast(torch.zeros(1), src=0)
        return 0.5
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


@pytest.mark.parametrize("key", ["right", "avg_through_c10d", "imported_name", "process_group_method",
                                 "all_gather_then_mean", "zero_dim_tensor", "one_element_tensor",
                                 "broadcast_in_turn", "functional_all_reduce", "numpy_float32",
                                 "init_process_group_directly"])
def test_checker_passes_right_evaluations_however_written(solution, key):
    report = check_evaluation(solution(key), world_sizes=(2, 3))
    assert report.passed, report
    assert all(line.startswith("PASS world_size") for line in report.lines)


@pytest.mark.parametrize("key", ["frames_no_group", "gc_no_group", "own_metric_only", "own_metric_as_tensor"])
def test_checker_refuses_answers_without_a_collective(solution, key):
    report = check_evaluation(solution(key), world_sizes=(2,))
    (line,) = report.lines
    assert not report.passed and "ran no collective" in line


def test_checker_refuses_metrics_swapped_through_the_store_beside_a_group_of_one(solution):
    (line,) = check_evaluation(solution("store_beside_a_group_of_one"), world_sizes=(2,)).lines
    assert line.startswith("FAIL") and "did not go into one" in line, line


def test_checker_refuses_metrics_swapped_beside_collectives_that_carry_none_of_them(solution):
    try:
        (line,) = check_evaluation(solution("files_beside_collectives_that_carry_nothing"), world_sizes=(2,)).lines
    finally:
        for folder in glob.glob("/tmp/evaluation-*"):
            shutil.rmtree(folder, ignore_errors=True)
    assert line.startswith("FAIL") and "did not go into one" in line, line


def test_checker_refuses_a_fake_group_beside_the_store(solution):
    (line,) = check_evaluation(solution("fake_group_beside_the_store"), world_sizes=(2,)).lines
    assert line.startswith("FAIL") and "on a 'fake' process group" in line, line


def test_checker_refuses_records_forged_in_the_callers_frame(solution):
    (line,) = check_evaluation(solution("records_forged_in_the_callers_frame"), world_sizes=(2,)).lines
    assert line.startswith("FAIL") and "ran no collective" in line, line


def test_checker_checks_against_the_metric_each_rank_drew_not_its_variables(solution):
    report = check_evaluation(solution("metric_rewritten_in_the_callers_frame"), world_sizes=(2,))
    assert not report.passed, report


def test_checker_refuses_metrics_read_from_the_sibling_ranks_output(solution):
    report = check_evaluation(solution("metrics_read_from_the_sibling_ranks_output_files"), world_sizes=(2,))
    (line,) = report.lines
    assert not report.passed and "returned -1.0, expected the mean" in line, line


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


def _stack(*frames: tuple[str, int, str], current: bool = True, cut: bool = False) -> str:
    """A thread's stack as faulthandler writes it, most recent call first."""
    lines = [f'  File "{path}", line {line} in {function}' for path, line, function in frames]
    head = "Current thread 0x2 (most recent call first):" if current else "Thread 0x3 (most recent call first):"
    return "\n".join(['Thread 0x1 (most recent call first):', '  File "/x/ddp_lib/_child.py", line 158 in _watch', "",
                      head, *lines, *(["  ..."] if cut else [])]) + "\n"


TORCH = os.path.join(sysconfig.get_paths()["purelib"], "torch")
CHILD = os.path.join(os.path.dirname(ddp_lib.__file__), "_child.py")
PROCESS_GROUP = os.path.join(os.path.dirname(ddp_lib.__file__), "process_group.py")


def test_where_a_rank_stopped_outside_its_worker():
    # A rank can hang after its worker returned (in a library's teardown, say): its stack has no
    # worker frame, and the place named is the call it was in.
    stack = _stack((f"{TORCH}/distributed/distributed_c10d.py", 2, "destroy_process_group"), (CHILD, 260, "run_rank"))
    place = stopped_at(stack)
    assert place.call == "destroy_process_group (torch/distributed/distributed_c10d.py)" and place.line == ""
    assert place.outside_worker and place.communicating
    assert stopped_at("") == stopped_at("garbage") == Stopped()
    # faulthandler cuts a deep stack: whether the worker was running is then unknown.
    assert not stopped_at(_stack((f"{TORCH}/distributed/distributed_c10d.py", 2, "barrier"), cut=True)).outside_worker


def test_where_a_rank_stopped_names_the_learners_line_and_ddps_waits():
    # Inside DDP's constructor, called from ddp_lib's process_group helper, called from the learner's file.
    stack = _stack((f"{TORCH}/nn/parallel/distributed.py", 2360, "_distributed_broadcast_coalesced"),
                   (PROCESS_GROUP, 190, "wrap_ddp"), ("/home/me/my_work/answer.py", 7, "one_step"),
                   (CHILD, 183, "_call_keeping_locals"), (CHILD, 252, "run_rank"))
    place = stopped_at(stack)
    assert place == Stopped("_distributed_broadcast_coalesced (torch/nn/parallel/distributed.py)", "answer.py line 7",
                            communicating=True)
    # torch installed elsewhere than this environment's site-packages (a distribution's dist-packages)
    elsewhere = stack.replace(TORCH, "/usr/lib/python3/dist-packages/torch")
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
        spawn(faulty_ranks.die_in_collective, 3, kwargs=dict(record_dir=str(tmp_path), timeout_s=3.0),
              show_output=False)
    assert info.value.rank == 1
    records = faulty_ranks.read_records(str(tmp_path))
    died_at = records.pop(1)["died_at"]
    assert sorted(records) == [0, 2]
    assert all(0 <= r["failed_at"] - died_at < 5.0 for r in records.values())


def test_root_cause_lines_keep_the_root_cause_and_the_stopped_ranks():
    stderr = """Failures:
[1]:
  time      : 2026-12-01_21:54:39
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 25225)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_21:54:37
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 25226)
  traceback : Traceback (most recent call last):
      raise ValueError("rank 1 read a corrupt batch")
  ValueError: rank 1 read a corrupt batch

============================================================
"""
    assert hung_ranks.root_cause_lines(stderr) == [
        "root cause: rank 1, exit code 1, ValueError: rank 1 read a corrupt batch",
        "stopped by torchrun: rank 0, exit code -15"]
    assert hung_ranks.root_cause_lines("") == ["no failure summary"]
