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
        elapsed = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
        seconds = elapsed.item()
        algbw = nbytes / seconds / 1e9
        return {"seconds": seconds, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world_size - 1) / world_size}
'''

# Right answers written differently: the name imported from torch.distributed, distributed_c10d's
# function, a mean over several timed calls, ReduceOp imported and passed by position, a float64 time.
RIGHT = {
    "imported_name": GOOD.replace("import torch.distributed as dist\n",
                                  "import torch.distributed as dist\nfrom torch.distributed import all_reduce\n")
                         .replace("dist.all_reduce(tensor)\n        elapsed", "all_reduce(tensor)\n        elapsed"),
    "c10d": GOOD.replace("dist.all_reduce(tensor)\n        elapsed",
                         "dist.distributed_c10d.all_reduce(tensor)\n        elapsed"),
    "average_of_five": GOOD.replace("dist.all_reduce(tensor)\n        elapsed = torch.tensor([time.perf_counter()",
                                    "for _ in range(5):\n            dist.all_reduce(tensor)\n"
                                    "        elapsed = torch.tensor([0.2 * (time.perf_counter()")
                           .replace("- start])", "- start)])"),
    "reduce_op_imported_positional": GOOD.replace("dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)",
                                                  "dist.all_reduce(elapsed, ReduceOp.MAX)")
                                         .replace("import torch.distributed as dist\n",
                                                  "import torch.distributed as dist\n"
                                                  "from torch.distributed import ReduceOp\n"),
    "float64_time": GOOD.replace("torch.tensor([time.perf_counter() - start])",
                                 "torch.tensor([time.perf_counter() - start], dtype=torch.float64)"),
}

WRONG = {
    "one_element": (GOOD.replace("dist.all_reduce(tensor)\n        elapsed",
                                 "dist.all_reduce(torch.ones(1))\n        elapsed")
                    .replace("dist.all_reduce(tensor)  # warm-up", "dist.all_reduce(torch.ones(1))"),
                    "never a float32 tensor of"),
    "float64_twice_the_bytes": (GOOD.replace("torch.ones(nbytes // 4)", "torch.ones(nbytes // 4, dtype=torch.float64)"),
                                "float64, never a float32 tensor of"),
    "hard_coded_size": (GOOD.replace("torch.ones(nbytes // 4)", "torch.ones(262144)"), "never a float32 tensor of"),

    "no_warm_up": (GOOD.replace("dist.all_reduce(tensor)  # warm-up", "pass"),
                   "timed the first all-reduce it ran, which also sets up gloo's connections: run one all-reduce "
                   "first (a warm-up)"),
    "made_up_time": (GOOD.replace("seconds = elapsed.item()", "seconds = 1.0"),
                     "but their all-reduces of"),
    "no_factor": (GOOD.replace("algbw * 2 * (world_size - 1) / world_size", "algbw"), "busbw equals algbw"),
    "gib": (GOOD.replace("/ 1e9", "/ 2**30"), "that is GiB/s"),
    "world_size_hard_coded": (GOOD.replace("algbw * 2 * (world_size - 1) / world_size", "algbw * 1.5"),
                              "busbw / algbw is 1.5, expected 2(N-1)/N (1 for N=2)"),
    "no_allreduce": (GOOD.replace("dist.all_reduce(tensor)\n        elapsed", "tensor.add_(1)\n        elapsed")
                     .replace("dist.all_reduce(tensor)  # warm-up", "pass")
                     .replace("dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)", "pass"), "ran no all-reduce"),
    # The honest mistake: each rank returns the time it measured itself.
    "own_time": (GOOD.replace("        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time\n",
                              ""),
                 "returned its own time, but an all-reduce ends only when the slowest rank is done: all_reduce the "
                 "seconds with op=ReduceOp.MAX"),
    "sum_of_times": (GOOD.replace("op=dist.ReduceOp.MAX", "op=dist.ReduceOp.SUM"),
                     "all-reduced its time with SUM: use op=ReduceOp.MAX"),
    "max_computed_but_own_time_returned": (GOOD.replace("seconds = elapsed.item()",
                                                        "seconds = elapsed.item() if rank == 0 else own")
                                           .replace("elapsed = torch.tensor([time.perf_counter() - start])",
                                                    "own = time.perf_counter() - start\n"
                                                    "        elapsed = torch.tensor([own])"),
                                           "the ranks returned different seconds"),
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


def test_bucket_counts_checker_accepts_the_counts_however_written():
    import numpy as np
    import torch

    from ddp_lib.exercises.lesson08 import check_bucket_counts
    assert check_bucket_counts(3, 1, 2).passed
    assert check_bucket_counts(3.0, np.int64(1), torch.tensor(2)).passed


def test_bucket_counts_checker_names_each_honest_mistake():
    from ddp_lib.exercises.lesson08 import check_bucket_counts
    report = str(check_bucket_counts(2, 2, 3))  # the two rules swapped, and the first step like the others
    assert "that is torch's rule; BucketedOverlapDDP closes a bucket *before*" in report
    assert "DDP's first step is special: it puts every gradient in one bucket" in report
    assert "that is lesson 04's rule; torch's DDP closes a bucket once it has *reached* the cap" in report
    report = str(check_bucket_counts(7, 10, 4))  # the lesson's own 1 MiB cap; one per parameter
    assert report.count("the count at the lesson's 1 MiB cap") == 2 and "one all-reduce per parameter" in report
    assert "only the first step puts every gradient in one bucket" in str(check_bucket_counts(3, 1, 1))
    assert "give a number of all-reduces, not a str" in str(check_bucket_counts("three", 1, 2))


def test_bucket_count_rules_agree_with_torchs_assignment():
    import random

    import torch
    import torch.distributed as dist

    from ddp_lib.exercises.lesson08 import gradient_bytes, scratch_bucket_count, torch_bucket_count
    rng = random.Random(8)
    cases = [(gradient_bytes(), cap) for cap in (2**20, 2 * 2**20)]
    cases += [([4 * rng.randrange(1, 1 << 18) for _ in range(rng.randrange(1, 20))], 4 * rng.randrange(1, 1 << 19))
              for _ in range(20)]
    for sizes, cap in cases:
        # torch's DDP's own bucket assignment (private, so this test follows it across versions).
        buckets, _ = dist._compute_bucket_assignment_by_size([torch.empty(n // 4) for n in sizes], [cap])
        assert torch_bucket_count(sizes, cap) == len(buckets), (sizes, cap)
    # Lesson 04's class, at the exercise's cap, as its own rule computes it.
    assert scratch_bucket_count(gradient_bytes(), 2 * 2**20) == 3


def test_halved_bytes_checker_accepts_the_fit_exact_or_rounded():
    import torch

    from ddp_lib.exercises.lesson08 import check_halved_bytes, gradient_bytes, kept_fit
    alpha, beta = kept_fit(2)
    nbytes = sum(gradient_bytes())
    assert check_halved_bytes((alpha + nbytes / beta) * 1e3, (alpha + nbytes / 2 / beta) * 1e3).passed
    assert check_halved_bytes(3.34, torch.tensor(1.82)).passed  # worked by hand with the fit's rounded numbers


def test_halved_bytes_checker_names_each_honest_mistake():
    from ddp_lib.exercises.lesson08 import check_halved_bytes, gradient_bytes, kept_fit
    (alpha, beta), (alpha4, beta4) = kept_fit(2), kept_fit(4)
    nbytes = sum(gradient_bytes())
    full = (alpha + nbytes / beta) * 1e3
    halved_alpha_too = str(check_halved_bytes(full, full / 2))
    assert "only the bytes halve; the hook still sends one message, so α stays" in halved_alpha_too
    assert "so the bytes halve" in str(check_halved_bytes(full, full))
    assert "add α" in str(check_halved_bytes(nbytes / beta * 1e3, full))
    assert "give milliseconds" in str(check_halved_bytes(full / 1e3, full))
    assert "that is the 4-rank fit" in str(check_halved_bytes((alpha4 + nbytes / beta4) * 1e3, full))
    assert "give the time in ms as a number, not a str" in str(check_halved_bytes("3.75 ms", full))


def test_model_at_work_checker_accepts_the_fit_exact_or_rounded():
    import torch

    from ddp_lib.exercises.lesson08 import check_model_at_work, gradient_bytes, kept_fit
    alpha, beta = kept_fit(2)
    nbytes = sum(gradient_bytes())
    assert check_model_at_work((alpha + nbytes / beta) * 1e3, (4 * alpha + nbytes / beta) * 1e3).passed
    assert check_model_at_work(3.34, torch.tensor(4.21)).passed  # worked by hand, as docs/answers.md does


def test_model_at_work_checker_names_each_honest_mistake():
    from ddp_lib.exercises.lesson08 import check_model_at_work, gradient_bytes, kept_fit
    (alpha, beta), (alpha4, beta4) = kept_fit(2), kept_fit(4)
    nbytes = sum(gradient_bytes())
    one, four = (alpha + nbytes / beta) * 1e3, (4 * alpha + nbytes / beta) * 1e3
    assert "counted the bytes four times" in str(check_model_at_work(one, 4 * one))
    assert "each all-reduce pays α once" in str(check_model_at_work(one, one))
    assert "add α" in str(check_model_at_work(nbytes / beta * 1e3, four))
    assert "give milliseconds" in str(check_model_at_work(one / 1e3, four))
    assert "that is the 4-rank fit" in str(check_model_at_work((alpha4 + nbytes / beta4) * 1e3, four))
    assert "give the time in ms as a number, not a NoneType" in str(check_model_at_work(None, four))
    assert not check_model_at_work(one, 99.0).passed


def test_two_rows_checker_accepts_the_hand_solution_exact_or_rounded():
    from ddp_lib.exercises.lesson08 import check_two_rows, two_rows
    assert check_two_rows(*two_rows()).passed
    assert check_two_rows(200.1, 1.214, 1064).passed  # worked by hand, as docs/answers.md does


def test_two_rows_checker_names_each_honest_mistake():
    from ddp_lib.exercises.lesson08 import check_two_rows, two_rows
    alpha, beta, at_1_mib = two_rows()
    # At 64 MiB α is under 1% of the time, so the row's algbw, S / t, passes as β within the tolerance.
    assert "give GB/s" in str(check_two_rows(alpha, beta * 1e9, at_1_mib))
    assert "give microseconds" in str(check_two_rows(alpha * 1e-6, beta, at_1_mib))
    assert "add α" in str(check_two_rows(alpha, beta, at_1_mib - alpha))
    assert "not 10⁶" in str(check_two_rows(alpha, beta, alpha + 1e6 / (beta * 1e3)))
    assert "give a number, not a NoneType" in str(check_two_rows(None, beta, at_1_mib))
    assert "solve t = α + S / β" in str(check_two_rows(alpha, 0.5, at_1_mib))
