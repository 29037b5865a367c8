"""Every lesson's checked exercise starts as a stub that its checker fails, and the worked
solution in ddp_lib/exercises/solutions passes the same checker. The stubs are read from the
notebooks themselves (the %%exercise cell that writes them to my_work/)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import nbformat
import pytest

from ddp_lib.exercises import lesson00, lesson01, lesson02, lesson03, lesson04, lesson05, lesson07, lesson08

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# lesson -> (notebook, file the lesson writes, function, checker with small settings)
EXERCISES = {
    "00": ("00_start_here", "lesson00_who_am_i", "who_am_i",
           lambda fn: lesson00.check_who_am_i(fn, world_sizes=(1, 2))),
    "01": ("01_process_groups", "lesson01_mean", "mean_across_ranks",
           lambda fn: lesson01.check_mean_across_ranks(fn, world_sizes=(2,))),
    "02": ("02_spawn", "lesson02_collect", "collect",
           lambda fn: lesson02.check_collect(fn, world_sizes=(2,))),
    "03": ("03_device_placement", "lesson03_device", "one_step", lesson03.check_device_worker),
    "04": ("04_gradient_sync", "lesson04_average", "average_gradients", lesson04.check_average_gradients),
    "05": ("05_training", "lesson05_sampler", "epoch_indices", lesson05.check_epoch_indices),
    "07": ("07_failure_lab", "lesson07_evaluation", "evaluate",
           lambda fn: lesson07.check_evaluation(fn, world_sizes=(2,))),
    "08": ("08_performance", "lesson08_bandwidth", "measure_allreduce", lesson08.check_bandwidth_worker),
}


def stub_source(notebook: str, filename: str) -> str:
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    header = re.compile(rf"^%%exercise my_work/{filename}\.py\n")
    cells = [c.source for c in nb.cells if c.cell_type == "code" and header.match(c.source)]
    assert len(cells) == 1, f"{notebook} has no single %%exercise my_work/{filename}.py cell"
    return header.sub("", cells[0])


@pytest.mark.parametrize("lesson", sorted(EXERCISES))
def test_the_stub_fails_and_the_solution_passes(lesson, tmp_path, monkeypatch):
    notebook, filename, function, check = EXERCISES[lesson]
    (tmp_path / f"stub_{filename}.py").write_text(stub_source(notebook, filename))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    stub = getattr(importlib.import_module(f"stub_{filename}"), function)
    report = check(stub)
    assert not report.passed and "NotImplementedError" in str(report), str(report)

    solution = getattr(importlib.import_module(f"ddp_lib.exercises.solutions.lesson{lesson}"), function)
    report = check(solution)
    assert report.passed, str(report)


def test_lesson08_busbw_stub_fails_and_its_solution_passes():
    from ddp_lib.exercises.solutions.lesson08 import busbw

    nb = nbformat.read(NOTEBOOKS / "08_performance.ipynb", as_version=4)
    (cell,) = [c.source for c in nb.cells if c.cell_type == "code" and "def busbw(" in c.source]
    namespace: dict = {}
    exec(cell.split("\n\n\nprint(")[0], namespace)  # the checker's import and the stub, as the notebook has them
    assert not lesson08.check_busbw(namespace["busbw"]).passed
    assert lesson08.check_busbw(busbw).passed


def test_lesson01_reduce_stub_raises_and_its_answer_passes(tmp_path, monkeypatch, free_master_port):
    """Exercise 2 of lesson 01: its stub raises NotImplementedError on every rank, and the stub with the
    answer's two lines in place of the raise passes the checker."""
    from ddp_lib.mp import RankRaisedError, labelled_spawn

    stub = stub_source("01_process_groups", "lesson01_reduce")
    raise_line = '        raise NotImplementedError("write reduce_max_to_2")'
    assert raise_line in stub
    answer = stub.replace(raise_line, "        dist.reduce(mine, dst=2, op=dist.ReduceOp.MAX)\n"
                                      "        return mine.tolist()")
    (tmp_path / "stub_lesson01_reduce.py").write_text(stub)
    (tmp_path / "answer_lesson01_reduce.py").write_text(answer)
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()

    with pytest.raises(RankRaisedError, match="NotImplementedError"):
        labelled_spawn(importlib.import_module("stub_lesson01_reduce").reduce_max_to_2, args=(4,), nprocs=4)
    run = labelled_spawn(importlib.import_module("answer_lesson01_reduce").reduce_max_to_2, args=(4,), nprocs=4)
    assert lesson01.check_reduce_max_to_2([2], run).startswith("Right"), run
