"""Lesson 02's checkers on real processes: right answers written differently from the worked
solutions pass; each mistake learners make is refused with its fix named."""

import pytest
from answer_files import load_answer, notebook_stub

from ddp_lib.exercises.lesson02 import check_collect, check_plan_launch, check_script
from ddp_lib.exercises.solutions.lesson02 import SCRIPT, collect

# Exercise 1: collect(fn, args, nprocs), each rank's value back from mp.spawn through a queue.
COLLECT_HEAD = """
import queue
import torch.multiprocessing as mp

"""
COLLECT_RIGHT = {
    "a_queue_and_get_with_a_timeout": """
def collect(fn, args, nprocs):
    results = mp.get_context("spawn").Queue()
    context = mp.spawn(fn, args=tuple(args) + (results,), nprocs=nprocs, join=False)
    got = []
    while True:
        try:
            got.append(results.get(timeout=0.2))
        except queue.Empty:
            pass
        if context.join(timeout=0.05):
            break
    while len(got) < nprocs:  # what arrived between the last get and the end
        try:
            got.append(results.get(timeout=0.5))
        except queue.Empty:
            break
    if sorted(rank for rank, _ in got) != list(range(nprocs)):
        raise RuntimeError("a rank put no value")
    return [value for _, value in sorted(got, key=lambda pair: pair[0])]
""",
}
COLLECT_WRONG = {
    "bare_get": ("""
def collect(fn, args, nprocs):
    results = mp.get_context("spawn").SimpleQueue()
    context = mp.spawn(fn, args=(*args, results), nprocs=nprocs, join=False)
    got = dict(results.get() for _ in range(nprocs))
    context.join()
    return [got[rank] for rank in range(nprocs)]
""", "raises before its put", "A bare get() waits for ever"),
    "join_true": ("""
def collect(fn, args, nprocs):
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(fn, args=(*args, results), nprocs=nprocs)
    got = dict(results.get() for _ in range(nprocs))
    return [got[rank] for rank in range(nprocs)]
""", "world_size 2", "Pass join=False"),
    "default_queue": ("""
def collect(fn, args, nprocs):
    results = mp.SimpleQueue()
    context = mp.spawn(fn, args=(*args, results), nprocs=nprocs, join=False)
    got, ended = {}, False
    while not ended:
        ended = context.join(timeout=0.5)
        while not results.empty():
            rank, value = results.get()
            got[rank] = value
    return [got[rank] for rank in range(nprocs)]
""", "world_size 2", 'mp.get_context("spawn").SimpleQueue()'),
    "no_check_for_missing_values": ("""
def collect(fn, args, nprocs):
    results = mp.get_context("spawn").SimpleQueue()
    context = mp.spawn(fn, args=(*args, results), nprocs=nprocs, join=False)
    got, ended = {}, False
    while not ended:
        ended = context.join(timeout=0.5)
        while not results.empty():
            rank, value = results.get()
            got[rank] = value
    return [got[rank] for rank in sorted(got)]
""", "returns without a put", "check that each put a value"),
    "pairs": ("""
def collect(fn, args, nprocs):
    results = mp.get_context("spawn").SimpleQueue()
    context = mp.spawn(fn, args=(*args, results), nprocs=nprocs, join=False)
    got, ended = [], False
    while not ended:
        ended = context.join(timeout=0.5)
        while not results.empty():
            got.append(results.get())
    return sorted(got, key=lambda pair: pair[0])
""", "world_size 2", "return the values alone"),
}


@pytest.mark.parametrize("case", sorted(COLLECT_RIGHT))
def test_right_collects_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"collect02_{case}", COLLECT_HEAD + COLLECT_RIGHT[case], "collect")
    report = check_collect(answer, world_sizes=(2,))
    assert report.passed, str(report)


def test_the_worked_collect_passes_on_2_and_3_ranks():
    report = check_collect(collect)
    assert report.passed and len(report.lines) == 4, str(report)


def test_the_collect_stub_is_refused_at_once(tmp_path, monkeypatch):
    source = notebook_stub("02_spawn.ipynb", "my_work/lesson02_collect.py")
    answer = load_answer(tmp_path, monkeypatch, "collectstub02", source, "collect")
    report = check_collect(answer, world_sizes=(2,))
    assert not report.passed and "NotImplementedError: write collect" in report.lines[0], str(report)


@pytest.mark.parametrize("case", sorted(COLLECT_WRONG))
def test_collect_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, where, fix = COLLECT_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"collectwrong02_{case}", COLLECT_HEAD + body, "collect")
    report = check_collect(answer, world_sizes=(2,), timeout=15.0)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert fails and where in fails[0] and fix in fails[0], str(report)


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


# Exercise 3: a script run as `python script.py` that launches with mp.spawn.
SCRIPT_RIGHT = {
    "a_main_function": """import torch.multiprocessing as mp


def work(rank, world_size):
    print(f"rank {rank} of {world_size} works", flush=True)


def main():
    print("loading the data set ...", flush=True)
    mp.spawn(work, args=(2,), nprocs=2)
    print("all ranks done", flush=True)


if __name__ == "__main__":
    main()
""",
}
SCRIPT_WRONG = {
    "the_stub": (None, "runs at the top level", "read the error a child prints"),
    "worker_under_the_guard": ("""import torch.multiprocessing as mp

if __name__ == "__main__":
    def work(rank, world_size):
        print(f"rank {rank} of {world_size} works", flush=True)

    print("loading the data set ...", flush=True)
    mp.spawn(work, args=(2,), nprocs=2)
    print("all ranks done", flush=True)
""", "a child found no worker", "Define work at the top level"),
    "loading_left_outside": ("""import torch.multiprocessing as mp

print("loading the data set ...", flush=True)


def work(rank, world_size):
    print(f"rank {rank} of {world_size} works", flush=True)


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
    print("all ranks done", flush=True)
""", "printed 3 times", "Move the loading"),
    "fork_instead": ("""import torch.multiprocessing as mp

print("loading the data set ...", flush=True)


def work(rank, world_size):
    print(f"rank {rank} of {world_size} works", flush=True)


mp.start_processes(work, args=(2,), nprocs=2, start_method="fork")
print("all ranks done", flush=True)
""", "no longer calls mp.spawn", "keep the launch"),
    "wrong_name": ("""import torch.multiprocessing as mp


def work(rank, world_size):
    print(f"rank {rank} of {world_size} works", flush=True)


if __name__ == "main":
    print("loading the data set ...", flush=True)
    mp.spawn(work, args=(2,), nprocs=2)
    print("all ranks done", flush=True)
""", "printed nothing", "compares __name__ with the name"),
}


@pytest.mark.parametrize("case", ["worked_solution", *sorted(SCRIPT_RIGHT)])
def test_right_scripts_pass(case, tmp_path):
    path = tmp_path / "lesson02_script.py"
    path.write_text(SCRIPT if case == "worked_solution" else SCRIPT_RIGHT[case])
    report = check_script(path)
    assert report.passed, str(report)


@pytest.mark.parametrize("case", sorted(SCRIPT_WRONG))
def test_script_mistakes_are_named_with_their_fix(case, tmp_path):
    body, mistake, fix = SCRIPT_WRONG[case]
    path = tmp_path / "lesson02_script.py"
    path.write_text(notebook_stub("02_spawn.ipynb", "my_work/lesson02_script.py") if body is None else body)
    report = check_script(path)
    assert not report.passed and mistake in report.lines[0] and fix in report.lines[0], str(report)
