"""Lesson 08's checkers: busbw from algbw, and a worker that measures an all-reduce."""

import importlib
import textwrap

import pytest

from ddp_lib.exercises.lesson08 import check_bandwidth_worker, check_busbw


def test_busbw_checker_accepts_the_formula_and_names_mistakes():
    assert check_busbw(lambda algbw, n: algbw * 2 * (n - 1) / n).passed
    report = str(check_busbw(lambda algbw, n: algbw))
    assert "busbw equals algbw: multiply by 2(N-1)/N (" in report
    assert "busbw / algbw is 2, expected 2(N-1)/N (" in str(check_busbw(lambda algbw, n: algbw * 2))


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
# function, and a mean over several timed calls.
RIGHT = {
    "imported_name": GOOD.replace("import torch.distributed as dist\n",
                                  "import torch.distributed as dist\nfrom torch.distributed import all_reduce\n")
                         .replace("dist.all_reduce(tensor)\n        seconds", "all_reduce(tensor)\n        seconds"),
    "c10d": GOOD.replace("dist.all_reduce(tensor)\n        seconds",
                         "dist.distributed_c10d.all_reduce(tensor)\n        seconds"),
    "average_of_five": GOOD.replace("dist.all_reduce(tensor)\n        seconds = time.perf_counter() - start",
                                    "for _ in range(5):\n            dist.all_reduce(tensor)\n"
                                    "        seconds = (time.perf_counter() - start) / 5"),
}

WRONG = {
    "one_element": (GOOD.replace("dist.all_reduce(tensor)\n        seconds",
                                 "dist.all_reduce(torch.ones(1))\n        seconds")
                    .replace("dist.all_reduce(tensor)  # warm-up", "dist.all_reduce(torch.ones(1))"),
                    "never a float32 tensor of"),
    "float64_twice_the_bytes": (GOOD.replace("torch.ones(nbytes // 4)", "torch.ones(nbytes // 4, dtype=torch.float64)"),
                                "float64, never a float32 tensor of"),
    "hard_coded_size": (GOOD.replace("torch.ones(nbytes // 4)", "torch.ones(262144)"), "never a float32 tensor of"),

    "no_warm_up": (GOOD.replace("dist.all_reduce(tensor)  # warm-up", "pass"),
                   "timed the first all-reduce it ran, which also sets up gloo's connections: run one all-reduce "
                   "first (a warm-up)"),
    "made_up_time": (GOOD.replace("seconds = time.perf_counter() - start", "seconds = 1.0"),
                     "but its all-reduces of"),
    "no_factor": (GOOD.replace("algbw * 2 * (world_size - 1) / world_size", "algbw"), "busbw equals algbw"),
    "gib": (GOOD.replace("/ 1e9", "/ 2**30"), "that is GiB/s"),
    "world_size_hard_coded": (GOOD.replace("algbw * 2 * (world_size - 1) / world_size", "algbw * 1.5"),
                              "busbw / algbw is 1.5, expected 2(N-1)/N (1 for N=2)"),
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
    assert [line.split(":")[0] for line in report.lines] == ["PASS world_size 2", "PASS world_size 3"]


@pytest.mark.parametrize("way", list(RIGHT))
def test_bandwidth_checker_accepts_right_answers_written_differently(learner_module, way):
    report = check_bandwidth_worker(learner_module(f"lesson08_right_{way}", RIGHT[way]))
    assert report.passed, str(report)


@pytest.mark.parametrize("mistake", list(WRONG))
def test_bandwidth_checker_names_the_mistake(learner_module, mistake):
    source, message = WRONG[mistake]
    # busbw equals algbw on 2 ranks: that mistake shows on 3
    world_sizes = (3,) if mistake == "no_factor" else (2,)
    report = check_bandwidth_worker(learner_module(f"lesson08_{mistake}", source), world_sizes=world_sizes)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and message in fails[0], str(report)


def test_busbw_checker_names_the_one_phase_factor_however_large_the_world_size():
    report = check_busbw(lambda algbw, n: algbw * (n - 1) / n if n > 2 else algbw * 2 * (n - 1) / n, cases=4)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and "(N-1)/N is only one phase" in fails[0], str(report)


def test_busbw_checker_accepts_a_numpy_or_torch_number():
    import torch
    assert check_busbw(lambda algbw, n: torch.tensor(algbw) * 2 * (n - 1) / n).passed
