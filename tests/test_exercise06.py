"""Lesson 06's checker, under real torchrun on two local nodes of two processes each: the lesson's
stub fails it, the worked solution passes, and hard-coded ranks fail with a line that names them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ddp_lib.exercises.lesson06 import check_launch_info, find_problems

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "06_torchrun.ipynb"
WRITEFILE = "%%writefile my_work/lesson06_worker.py\n"


def _write(tmp_path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text("import os\n\n\ndef launch_info(rank, world_size):\n"
                                        + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n")
    return f"{name}:launch_info"


def test_the_lessons_stub_fails_and_says_why(tmp_path):
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    stub = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith(WRITEFILE))
    (tmp_path / "lesson06_stub.py").write_text(stub[len(WRITEFILE):])
    report = check_launch_info("lesson06_stub:launch_info", directory=str(tmp_path))
    assert not report.passed
    assert report.lines == [
        "FAIL the job failed: NotImplementedError: write launch_info (the same on every rank that reported)"]


def test_the_worked_solution_passes():
    from ddp_lib.exercises.solutions.lesson06 import launch_info

    report = check_launch_info(launch_info)
    assert report.passed and report.lines[0].startswith("PASS on 2 nodes x 2 processes")


def test_hard_coded_values_fail_on_the_ranks_where_they_are_wrong(tmp_path):
    target = _write(tmp_path, "ex06_wrong", """
        return {"world_size": int(os.environ["LOCAL_WORLD_SIZE"]), "local_rank": 0,
                "local_world_size": os.environ["LOCAL_WORLD_SIZE"], "node_rank": 0}""")
    report = str(check_launch_info(target, directory=str(tmp_path)))
    assert report.startswith("FAIL")
    assert "rank 0: world_size is 2, expected 4: read WORLD_SIZE" in report
    assert "rank 0: local_world_size is '2', expected 2" in report
    assert "rank 1: local_rank is 0, expected 1: read LOCAL_RANK (not RANK)" in report
    assert "rank 2: node_rank is 0, expected 1: read GROUP_RANK" in report
    assert "rank 2: local_rank" not in report  # 0 is right there


def test_the_global_rank_is_not_the_local_rank():
    info = [{"world_size": 4, "local_rank": r, "local_world_size": 2, "node_rank": r // 2} for r in range(4)]
    assert find_problems(info, nnodes=2, nproc_per_node=2) == [
        "rank 2: local_rank is 2, expected 0: read LOCAL_RANK (not RANK) and convert it with int()",
        "rank 3: local_rank is 3, expected 1: read LOCAL_RANK (not RANK) and convert it with int()"]


def test_missing_ranks_and_keys():
    assert find_problems([{}], nnodes=2, nproc_per_node=1) == [
        "1 of 2 ranks printed a result; every rank must return a dict"]
    info = {"world_size": 2, "local_rank": 0, "local_world_size": 1}
    assert find_problems([info, info], 2, 1)[0] == "rank 0: the result lacks node_rank"


def test_two_ranks_errors_on_one_line_are_read_apart():
    from ddp_lib.exercises.lesson06 import _first_failure

    # torchrun's children share one stderr: two ranks writing at once can share a line.
    stderr = "[rank1]: ValueError: bad local rank[rank0]: NotImplementedError: write launch_info\n"
    assert _first_failure(stderr, 1) == "rank 0 raised NotImplementedError: write launch_info"
    # Whichever ranks got to report the same error, the report reads the same.
    for stderr in ("[rank1]: NotImplementedError: write launch_info\n",
                   "[rank0]: NotImplementedError: write launch_info[rank3]: NotImplementedError: write launch_info\n"):
        assert _first_failure(stderr, 1) == ("NotImplementedError: write launch_info "
                                             "(the same on every rank that reported)")
