"""Lesson 02's checker on real ranks: two right answers written differently from the solution
pass on 2 and 3 ranks; each mistake learners make is refused with its fix named."""

import functools

import pytest
import torch.multiprocessing as mp
from answer_files import load_answer, notebook_stub

import ddp_lib.mp
from ddp_lib.exercises.lesson02 import check_partial_bad_rank, check_plan_launch, check_reassemble
from ddp_lib.workers.spawning import fail_on_rank

HEAD = """
import torch
import torch.distributed as dist
from ddp_lib.process_group import process_group

def reassemble(rank, world_size, share):
    with process_group(rank, world_size):
"""
RIGHT = {
    "padded_tensors": """
        longest = -(-sum(len(s) for s in [share]) // 1) + 1
        n = torch.tensor([len(share)])
        dist.all_reduce(n)
        width = (int(n) + world_size - 1) // world_size
        mine = torch.full((width,), -1, dtype=torch.long)
        mine[:len(share)] = torch.tensor(share, dtype=torch.long)
        everyone = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(everyone, mine)
        return [v for v in torch.stack(everyone).T.reshape(-1).tolist() if v != -1][:int(n)]
""",
    "objects_then_slots": """
        shares = [None] * world_size
        dist.all_gather_object(shares, share)
        whole = [None] * sum(map(len, shares))
        for r, s in enumerate(shares):
            whole[r::world_size] = s
        return whole
""",
}
WRONG = {
    "all_gather_unequal_lengths": ("""
        mine = torch.tensor(share)
        everyone = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(everyone, mine)
        return torch.stack(everyone).T.reshape(-1).tolist()
""", "FAIL world_size 2", "killed by SIGABRT", "Received data size doesn't match expected size"),
    "hard_coded_two": ("""
        shares = [None] * world_size
        dist.all_gather_object(shares, share)
        return [shares[i % 2][i // 2] for i in range(sum(map(len, shares)))]
""", "FAIL world_size 3", "raised IndexError", ": return [shares[i % 2][i // 2]"),
    "rank_by_rank": ("""
        shares = [None] * world_size
        dist.all_gather_object(shares, share)
        return [x for s in shares for x in s]
""", "FAIL world_size 2", "one after another", "the split is round robin"),
    "own_share": ("""
        return share
""", "FAIL world_size 2", "no collective ran", "all_gather_object"),
}


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right02_{case}", HEAD + RIGHT[case], "reassemble")
    report = check_reassemble(answer)
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("case", sorted(WRONG))
def test_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, refusal, mistake, fix = WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong02_{case}", HEAD + body, "reassemble")
    report = check_reassemble(answer, world_sizes=(3,) if "3" in refusal else (2,))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(refusal), str(report)
    assert mistake in fails[0] and fix in fails[0], str(report)


# Exercise 2: plan_launch(world_size, out_dir), the keyword arguments of mp.spawn; no process starts.
PLAN_HEAD = """
import functools
from ddp_lib.workers.spawning import record_args

"""
PLAN_RIGHT = {
    "tuple": """
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=(world_size, out_dir), nprocs=world_size)
""",
    "partial_and_a_list": """
def plan_launch(world_size, out_dir):
    return {"nprocs": world_size, "args": [world_size], "fn": functools.partial(record_args, out_dir=out_dir)}
""",
}
PLAN_WRONG = {
    "the_stub": (None, "args is the int 2", "write (x, ...)"),
    "nested_worker": ("""
def plan_launch(world_size, out_dir):
    def worker(rank, world_size, out_dir):
        record_args(rank, world_size, out_dir)
    return dict(fn=worker, args=(world_size, out_dir), nprocs=world_size)
""", "fn does not pickle", "a function defined inside another"),
    "lambda_in_args": ("""
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=(world_size, lambda: out_dir), nprocs=world_size)
""", "args does not pickle", "a lambda"),
    "rank_in_args": ("""
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=(0, world_size, out_dir), nprocs=world_size)
""", "child 0 would call fn(0, *args) and get TypeError", "args holds only what comes after the rank"),
    "out_dir_missing": ("""
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=(world_size,), nprocs=world_size)
""", "missing a required argument: 'out_dir'", "args holds only"),
    "swapped": ("""
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=(out_dir, world_size), nprocs=world_size)
""", "record_args(i=0, world_size='my_work/lesson02-calls'", "it should get i=0, world_size=2"),
    "a_string": ("""
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=out_dir, nprocs=world_size)
""", "args is the str", "put the values in a tuple"),
    "fixed_nprocs": ("""
def plan_launch(world_size, out_dir):
    return dict(fn=record_args, args=(world_size, out_dir), nprocs=2)
""", "FAIL world_size 3: nprocs is 2", "nprocs=world_size"),
    "positional_call": ("""
def plan_launch(world_size, out_dir):
    return (record_args, (world_size, out_dir), world_size)
""", "plan_launch returned (", "dict(fn=..., args=..., nprocs=...)"),
}


@pytest.mark.parametrize("case", sorted(PLAN_RIGHT))
def test_right_launch_plans_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"plan02_{case}", PLAN_HEAD + PLAN_RIGHT[case], "plan_launch")
    report = check_plan_launch(answer)
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("case", sorted(PLAN_WRONG))
def test_launch_plan_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, mistake, fix = PLAN_WRONG[case]
    source = notebook_stub("02_spawn.ipynb", "my_work/lesson02_launch.py") if body is None else PLAN_HEAD + body
    answer = load_answer(tmp_path, monkeypatch, f"planwrong02_{case}", source, "plan_launch")
    report = check_plan_launch(answer)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert fails and not report.passed, str(report)
    assert mistake in "\n".join(fails) and fix in fails[0], str(report)


def test_a_notebook_worker_is_refused_before_it_is_pickled():
    def worker(rank, world_size, out_dir):
        pass

    worker.__module__ = "__main__"  # as a function defined in a notebook cell
    report = check_plan_launch(lambda world_size, out_dir: dict(fn=worker, args=(world_size, out_dir),
                                                                nprocs=world_size), world_sizes=(2,))
    assert report.lines[0].startswith("FAIL world_size 2: fn is ") and "defined in the notebook" in report.lines[0]


# Exercise 3: answers checked against what the learner's run printed, as the runs print it.
RAN_0 = "Process 0 terminated with the following error (rank 0): ValueError: rank 0 of 2 was told to fail"
RAN_1 = "Process 1 terminated with the following error (rank 1): ValueError: rank 1 of 2 was told to fail"
TWICE = ("Process 0 terminated with the following error (rank 0): TypeError: fail_on_rank() got multiple "
         "values for argument 'rank'")


def raised_by(launch, fn, args):
    """The exception ``launch(fn, args=args, nprocs=2)`` raised, as the lesson's cell keeps it."""
    try:
        launch(fn, args=args, nprocs=2)
    except Exception as e:
        return e
    raise AssertionError("the launch raised nothing")


def start_from_forkserver(fn, args, nprocs):
    return mp.start_processes(fn, args=args, nprocs=nprocs, start_method="forkserver")


# Right answers written differently: each launch binds bad_rank=0 with functools.partial.
PARTIAL_RUNS = {
    "as_the_answers": (ddp_lib.mp.labelled_spawn, functools.partial(fail_on_rank, bad_rank=0), (2,)),
    "world_size_bound_too": (ddp_lib.mp.labelled_spawn, functools.partial(fail_on_rank, world_size=2, bad_rank=0), []),
    "torch_start_processes": (start_from_forkserver, functools.partial(fail_on_rank, bad_rank=0), (2,)),
}


@pytest.mark.parametrize("run", PARTIAL_RUNS)
def test_partial_bad_rank_right_answers_pass(run):
    report = check_partial_bad_rank(0, raised_by(*PARTIAL_RUNS[run]))
    assert report.passed, report


def test_partial_bad_rank_needs_the_partial():
    """The honest shortcut, bad_rank by position in args, raises the same error: the launch tells it apart."""
    report = check_partial_bad_rank(0, raised_by(ddp_lib.mp.labelled_spawn, fail_on_rank, (2, 0)))
    assert not report.passed and "did not go through a partial" in report.lines[0], report
    assert "args=(2, 0)" in report.lines[0], report


@pytest.mark.parametrize("error", [RAN_0, ValueError(RAN_0), "from_a_run"], ids=["text", "made_anew", "run_as_text"])
def test_partial_bad_rank_wants_the_exception_itself(error):
    if error == "from_a_run":
        error = str(raised_by(ddp_lib.mp.labelled_spawn, functools.partial(fail_on_rank, bad_rank=0), (2,)))
    report = check_partial_bad_rank(0, error)
    assert not report.passed and "partial_error = e" in report.lines[0], report


@pytest.mark.parametrize("answer, error, fix", [
    (None, None, "set named_rank"),
    ("zero", RAN_0, "expected one rank number"),
    (0, None, "set partial_error"),
    (1, RAN_0, "default bad_rank, but your run says rank 0"),
    (2, RAN_0, "read your run's error again"),
    (0, RAN_1, "Pass fn=functools.partial(fail_on_rank, bad_rank=0)"),
    (0, TWICE, "give only bad_rank by keyword"),
    (0, "Process 0 terminated with the following error (rank 0): NameError: name 'x' is not defined",
     "not fail_on_rank's ValueError"),
    (0, "positional", "bind bad_rank by name"),
], ids=["unset", "a_word", "no_run", "the_default", "world_size", "keyword_lost", "rank_by_keyword", "other_error",
        "bound_by_position"])
def test_partial_bad_rank_mistakes_are_named(answer, error, fix):
    if error == "positional":  # functools.partial(fail_on_rank, 0): the launcher refuses it before any rank starts
        error = raised_by(ddp_lib.mp.labelled_spawn, functools.partial(fail_on_rank, 0), (2,))
    report = check_partial_bad_rank(answer, error)
    assert not report.passed and len(report.lines) == 1 and fix in report.lines[0], report
    assert "bad_rank=0" not in report.lines[0] or fix != "bind bad_rank by name", report  # a hint, not the answer
