"""Lesson 00's checker on real ranks: two right answers written differently from the solution
pass on 1, 2 and 3 ranks; each mistake learners make is refused with its fix named."""

import pytest
from answer_files import load_answer

from ddp_lib.exercises.lesson00 import check_who_am_i
from ddp_lib.exercises.solutions import lesson00 as solution

HEAD = """
import torch.distributed as dist
from ddp_lib.process_group import process_group

def who_am_i(rank, world_size, name):
    with process_group(rank, world_size):
"""
RIGHT = {
    "asks_the_group": """
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, name)
        return dict(rank=dist.get_rank(), world_size=dist.get_world_size(), is_main=dist.get_rank() == 0,
                    everyone=tuple(everyone))
""",
    "broadcast_from_each": """
        everyone = []
        for source in range(world_size):
            box = [name if source == rank else None]
            dist.broadcast_object_list(box, src=source)
            everyone.append(box[0])
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""",
}
WRONG = {
    "hard_coded_list_length": ("""
        everyone = [None, None]
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""", "FAIL world_size 3: rank 0 raised IndexError", "use world_size ([None] * world_size)"),
    "gather_object_alone": ("""
        everyone = [None] * world_size if rank == 0 else None
        dist.gather_object(name, everyone, dst=0)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""", "FAIL world_size 2: rank 1 has no list of names", "all_gather_object gives it to every rank"),
    "kept_the_return_value": ("""
        everyone = dist.all_gather_object([None] * world_size, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""", "FAIL world_size 2: rank 0 returned everyone=None", "fills the list you pass it in place"),
    "no_collective": ("""
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": [name] * world_size}
""", "FAIL world_size 2: no collective ran", "dist.all_gather_object"),
}


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right00_{case}", HEAD + RIGHT[case], "who_am_i")
    report = check_who_am_i(answer)
    assert report.passed, str(report)
    assert len(report.lines) == 3


def test_the_solution_passes_on_two_ranks():
    assert check_who_am_i(solution.who_am_i, world_sizes=(2,)).passed


@pytest.mark.parametrize("case", sorted(WRONG))
def test_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, refusal, hint = WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong00_{case}", HEAD + body, "who_am_i")
    report = check_who_am_i(answer, world_sizes=(2, 3) if "IndexError" in refusal else (2,))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(refusal) and hint in fails[0], str(report)
