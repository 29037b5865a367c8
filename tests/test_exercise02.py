"""Lesson 02's checker on real ranks: two right answers written differently from the solution
pass on 2 and 3 ranks; each mistake learners make is refused with its fix named."""

import pytest
from answer_files import load_answer

from ddp_lib.exercises.lesson02 import check_reassemble

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
