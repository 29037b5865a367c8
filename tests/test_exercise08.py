"""Lesson 08's checkers: busbw from algbw, and a worker that measures an all-reduce."""

import importlib
import textwrap

import pytest

from ddp_lib.exercises.lesson08 import check_bandwidth_worker, check_busbw


def test_busbw_checker_accepts_the_formula_and_names_mistakes():
    assert check_busbw(lambda algbw, n: algbw * 2 * (n - 1) / n).passed
    report = str(check_busbw(lambda algbw, n: algbw))
    assert "busbw equals algbw: multiply by 2(N-1)/N (" in report
    assert "not 2" in str(check_busbw(lambda algbw, n: algbw * 2))


def test_busbw_checker_draws_its_inputs_so_a_copied_number_fails():
    assert not check_busbw(lambda algbw, n: {2: 10.0, 4: 15.0, 8: 17.5}.get(n, 0.0)).passed


def test_busbw_checker_refuses_a_lookup_table_of_factors():
    table = {2: 1.0, 4: 1.5, 8: 1.75, 16: 1.875}  # right for the usual world sizes, and only those
    report = check_busbw(lambda algbw, n: algbw * table[n])
    assert not report.passed and "raised KeyError" in str(report), str(report)


def test_busbw_checker_accepts_the_formula_written_differently():
    assert check_busbw(lambda algbw, n: 2 * algbw - 2 * algbw / n).passed


def test_busbw_checker_reports_an_exception():
    def stub(algbw, world_size):
        raise NotImplementedError("write busbw")
    assert "raised NotImplementedError: write busbw" in str(check_busbw(stub))


GOOD = '''
import time, torch
import torch.distributed as dist
from ddp_lib.process_group import process_group

def measure_allreduce(rank, world_size, nbytes):
    with process_group(rank, world_size):
        tensor = torch.ones(nbytes // 4)
        dist.all_reduce(tensor)  # warm-up
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        seconds = time.perf_counter() - start
        algbw = nbytes / seconds / 1e9
        return {"seconds": seconds, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world_size - 1) / world_size}
'''

# Right answers written differently: the name imported from torch.distributed, distributed_c10d's
# function, the group's own method, and a mean over several timed calls.
RIGHT = {
    "imported_name": GOOD.replace("import torch.distributed as dist\n",
                                  "import torch.distributed as dist\nfrom torch.distributed import all_reduce\n")
                         .replace("dist.all_reduce(tensor)\n        seconds", "all_reduce(tensor)\n        seconds"),
    "c10d": GOOD.replace("dist.all_reduce(tensor)\n        seconds",
                         "dist.distributed_c10d.all_reduce(tensor)\n        seconds"),
    "average_of_five": GOOD.replace("dist.all_reduce(tensor)\n        seconds = time.perf_counter() - start",
                                    "for _ in range(5):\n            dist.all_reduce(tensor)\n"
                                    "        seconds = (time.perf_counter() - start) / 5"),
    "group_method": GOOD.replace("dist.all_reduce(tensor)\n        seconds",
                                 "dist.group.WORLD.allreduce([tensor]).wait()\n        seconds"),
}

WRONG = {
    "one_element": (GOOD.replace("dist.all_reduce(tensor)\n        seconds",
                                 "dist.all_reduce(torch.ones(1))\n        seconds")
                    .replace("dist.all_reduce(tensor)  # warm-up", "dist.all_reduce(torch.ones(1))"),
                    "never a float32 tensor of"),
    "float64_twice_the_bytes": (GOOD.replace("torch.ones(nbytes // 4)", "torch.ones(nbytes // 4, dtype=torch.float64)"),
                                "float64, never a float32 tensor of"),
    "hard_coded_size": (GOOD.replace("torch.ones(nbytes // 4)", "torch.ones(262144)"), "never a float32 tensor of"),

    "made_up_time": (GOOD.replace("seconds = time.perf_counter() - start", "seconds = 1.0"),
                     "but its all-reduces of"),
    "no_factor": (GOOD.replace("algbw * 2 * (world_size - 1) / world_size", "algbw"), "busbw equals algbw"),
    "gib": (GOOD.replace("/ 1e9", "/ 2**30"), "that is GiB/s"),
    "world_size_hard_coded": (GOOD.replace("algbw * 2 * (world_size - 1) / world_size", "algbw * 1.5"),
                              "expected 2(N-1)/N = 1 for N=2"),
    "no_allreduce": (GOOD.replace("dist.all_reduce(tensor)\n        seconds", "tensor.add_(1)\n        seconds")
                     .replace("dist.all_reduce(tensor)  # warm-up", "pass"), "ran no all-reduce"),
    "list": (GOOD.replace('return {"seconds"', 'return [{"seconds"').replace("/ world_size}", "/ world_size}]"),
             "rank 0 returned list: return a dict with keys seconds, algbw_gbs, busbw_gbs"),
}


@pytest.fixture
def learner_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # the launched ranks get this sys.path too

    def write(name, source):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        return importlib.import_module(name).measure_allreduce
    return write


def test_bandwidth_checker_accepts_a_right_worker_on_two_world_sizes(learner_module):
    report = check_bandwidth_worker(learner_module("lesson08_good", GOOD))
    assert report.passed, str(report)
    assert [line.split(":")[0] for line in report.lines[::2]] == ["PASS world_size 2", "PASS world_size 3"]


@pytest.mark.parametrize("way", list(RIGHT))
def test_bandwidth_checker_accepts_right_answers_written_differently(learner_module, way):
    report = check_bandwidth_worker(learner_module(f"lesson08_right_{way}", RIGHT[way]), world_sizes=(2,))
    assert report.passed, str(report)


@pytest.mark.parametrize("mistake", list(WRONG))
def test_bandwidth_checker_names_the_mistake(learner_module, mistake):
    source, message = WRONG[mistake]
    report = check_bandwidth_worker(learner_module(f"lesson08_{mistake}", source))
    assert not report.passed and message in str(report), str(report)


def test_busbw_checker_refuses_the_expected_value_read_from_its_frame():
    def peek(algbw, world_size):
        import sys
        frame = sys._getframe(1)
        return frame.f_locals.get("expected", 0.0)
    assert not check_busbw(peek).passed


def test_busbw_checker_accepts_a_numpy_or_torch_number():
    import torch
    assert check_busbw(lambda algbw, n: torch.tensor(algbw) * 2 * (n - 1) / n).passed


# Adversaries: no all-reduce at all, the expected record written into the checker's own frame;
# a made-up time inside a range widened by one deliberately slow all-reduce per rank.
ADVERSARIAL = {
    "record_injected_into_the_frame": ('''
import sys
def measure_allreduce(rank, world_size, nbytes):
    fake = {"numel": nbytes // 4, "dtype": "float", "seconds": 0.01}
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, list):
                value.append(fake)
        frame = frame.f_back
    algbw = nbytes / 0.01 / 1e9
    return {"seconds": 0.01, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world_size - 1) / world_size}
''', "ran no all-reduce"),
    "profiler_class_patched": ('''
import torch.profiler


class _Event:
    name, input_dtypes = "gloo:all_reduce", ["float"]

    def __init__(self, numel):
        self.input_shapes = [[numel]]
        self.time_range = type("Range", (), {"elapsed_us": lambda self: 10000.0})()


def measure_allreduce(rank, world_size, nbytes):
    torch.profiler.profile.events = lambda self: [_Event(nbytes // 4)]  # no all-reduce, a forged record
    algbw = nbytes / 0.01 / 1e9
    return {"seconds": 0.01, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world_size - 1) / world_size}
''', "ran no all-reduce"),
    # A made-up time between the fast all-reduces and the runs that hold a slow one, chosen (from
    # this rank's own timings, which the machine's load stretches) far from every duration the
    # checker accepts: any one all-reduce, or the mean of a run of them, within x1.5 + 2 ms.
    "made_up_time_inside_a_widened_range": ("""
import math, time, torch
import torch.distributed as dist
from ddp_lib.process_group import process_group

def measure_allreduce(rank, world_size, nbytes):
    with process_group(rank, world_size):
        tensor = torch.ones(nbytes // 4)
        took = []
        for slow in range(world_size):
            if rank != slow:
                time.sleep(3.0)  # the slow rank waits for this one: a 3 s all-reduce on its side
            start = time.perf_counter()
            dist.all_reduce(tensor)
            took.append(time.perf_counter() - start)
        start = time.perf_counter()
        dist.all_reduce(tensor)
        took.append(time.perf_counter() - start)
        fast = max(t for t in took if t < 1.0)
        slowest_mean = sum(took) / len(took)  # the smallest mean of a run that holds the 3 s one
        seconds = math.sqrt((1.5 * fast + 0.002) * (slowest_mean / 1.5 - 0.002))
        algbw = nbytes / seconds / 1e9
        return {"seconds": seconds, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world_size - 1) / world_size}
""", "but its all-reduces of"),
    "a_group_of_one_on_every_rank": ('''
import time
import torch
import torch.distributed as dist


def measure_allreduce(rank, world_size, nbytes):
    # No communication with any other rank: every rank forms a group of one.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(nbytes // 4)
        dist.all_reduce(t)
        start = time.perf_counter()
        dist.all_reduce(t)
        seconds = time.perf_counter() - start
    finally:
        dist.destroy_process_group()
    algbw = nbytes / seconds / 1e9
    return {"seconds": seconds, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world_size - 1) / world_size}
''', "in a group of 1 rank(s), not over all 2"),
    # A first all-reduce over every rank (so the job's group was used), then the timed one in a
    # group of this rank alone: the size and the time are right, but nothing crossed between ranks.
    "warm_up_over_all_then_timed_alone": (GOOD.replace(
        "dist.barrier()",
        "alone = [dist.new_group([r]) for r in range(world_size)][rank]  # every rank makes every group\n"
        "        dist.barrier()").replace(
        "dist.all_reduce(tensor)\n        seconds", "dist.all_reduce(tensor, group=alone)\n        seconds"),
        "in a group of 1 rank(s), not over all"),
    # The same, with the timed all-reduce switched out of torch's dispatcher (where its group is seen).
    "timed_alone_outside_the_dispatcher": (GOOD.replace(
        "dist.barrier()",
        "alone = [dist.new_group([r]) for r in range(world_size)][rank]\n"
        "        dist.barrier()").replace(
        "dist.all_reduce(tensor)\n        seconds",
        "with torch._C._DisableTorchDispatch():\n"
        "            dist.all_reduce(tensor, group=alone)\n        seconds"),
        "outside torch's dispatcher"),
    # The same, with a made-up record of a call over every rank added wherever the checker's frame
    # seems to keep its records.
    "timed_alone_outside_the_dispatcher_with_a_forged_record": (GOOD.replace(
        "dist.barrier()",
        "alone = [dist.new_group([r]) for r in range(world_size)][rank]\n"
        "        import sys\n"
        "        for held in sys._getframe(1).f_locals.values():\n"
        "            getattr(held, 'calls', []).append({'numel': nbytes // 4, 'dtype': 'torch.float32', "
        "'group_size': world_size})\n"
        "        dist.barrier()").replace(
        "dist.all_reduce(tensor)\n        seconds",
        "with torch._C._DisableTorchDispatch():\n"
        "            dist.all_reduce(tensor, group=alone)\n        seconds"),
        "outside torch's dispatcher"),
    # The functional collective's all-reduce in a group of one.
    "functional_all_reduce_alone": (GOOD.replace(
        "dist.barrier()",
        "alone = [dist.new_group([r]) for r in range(world_size)][rank]\n"
        "        import torch.distributed._functional_collectives as funcol\n"
        "        dist.barrier()").replace(
        "dist.all_reduce(tensor)\n        seconds",
        "funcol.all_reduce(tensor, 'sum', alone).wait()\n        seconds"),
        "in a group of 1 rank(s), not over all"),
}


@pytest.mark.parametrize("attack", list(ADVERSARIAL))
def test_bandwidth_checker_refuses_adversaries(learner_module, attack):
    source, message = ADVERSARIAL[attack]
    report = check_bandwidth_worker(learner_module(f"lesson08_attack_{attack}", source), world_sizes=(2,))
    assert not report.passed and message in str(report), str(report)


@pytest.mark.parametrize("world_size", [2, 3])
def test_bandwidth_checker_requires_the_timed_allreduce_to_span_every_rank(learner_module, world_size):
    source, message = ADVERSARIAL["warm_up_over_all_then_timed_alone"]
    report = check_bandwidth_worker(learner_module(f"lesson08_alone_{world_size}", source), world_sizes=(world_size,))
    assert not report.passed and f"{message} {world_size}" in str(report), str(report)
