"""The lesson 02 checker on answers that must pass (the collective written several ways) and on
answers that must fail: no collective, a hard-coded world size, values looked for in the checker's
frames or through gc, answers guessed from the rank, made-up numbers of the right shape."""

from __future__ import annotations

import importlib
import itertools
import textwrap

import pytest

from ddp_lib.exercises.lesson02 import check_reassemble, draw_n, expected_share, interleave

_names = itertools.count()


@pytest.fixture
def solution(tmp_path, monkeypatch):
    """Write a learner's file (as %%writefile would) and import its reassemble."""
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks

    def write(body: str):
        name = f"lesson02_solution_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        importlib.invalidate_caches()
        return importlib.import_module(name).reassemble

    return write


def fails(fn, **options) -> list[str]:
    return [line.removeprefix("FAIL ") for line in check_reassemble(fn, **options).lines if line.startswith("FAIL")]


def test_round_robin_helpers():
    assert [expected_share(r, 3, 10) for r in range(3)] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert interleave([[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]) == list(range(10))
    assert all(n % 2 and n % 3 for n in (draw_n(__import__("random").Random(s)) for s in range(20)))


# --- right answers, written differently: must pass -------------------------------------------

GATHER_OBJECTS = """
    import torch.distributed as dist
    from ddp_lib.process_group import process_group

    def reassemble(rank, world_size, share):
        with process_group(rank, world_size):
            shares = [None] * world_size
            dist.all_gather_object(shares, share)
        return [shares[i % world_size][i // world_size] for i in range(sum(map(len, shares)))]
"""

# A zero tensor of length n on each rank, filled at this rank's positions, summed over ranks.
PADDED_SUM = """
    import torch
    {imports}

    def reassemble(rank, world_size, share):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        try:
            n = torch.tensor([len(share)])
            {sum_lengths}
            whole = torch.zeros(int(n.item()), dtype=torch.int64)
            whole[rank::world_size] = torch.tensor(share)
            {sum_whole}
            return whole.tolist()
        finally:
            dist.destroy_process_group()
"""

RIGHT_ANSWERS = {
    "all_gather_object": GATHER_OBJECTS,
    "distributed_c10d.all_reduce": PADDED_SUM.format(
        imports="import torch.distributed as dist\n    from torch.distributed import distributed_c10d",
        sum_lengths="distributed_c10d.all_reduce(n)", sum_whole="distributed_c10d.all_reduce(whole)"),
    "from torch.distributed import all_reduce": PADDED_SUM.format(
        imports="import torch.distributed as dist\n    from torch.distributed import all_reduce",
        sum_lengths="all_reduce(n)", sum_whole="all_reduce(whole)"),
    "ReduceOp.AVG": PADDED_SUM.format(
        imports="import torch.distributed as dist",
        sum_lengths="dist.all_reduce(n)",
        sum_whole="whole = whole.double(); dist.all_reduce(whole, op=dist.ReduceOp.AVG); "
                  "whole = (whole * world_size).round().long()"),
    "ProcessGroup method": PADDED_SUM.format(
        imports="import torch.distributed as dist",
        sum_lengths="dist.group.WORLD.allreduce([n]).wait()",
        sum_whole="dist.group.WORLD.allreduce([whole]).wait()"),
}


# all_gather_object "gathers any picklable object": the share as floats, or as a tensor.
RIGHT_ANSWERS["all_gather_object of floats"] = GATHER_OBJECTS.replace(
    "dist.all_gather_object(shares, share)", "dist.all_gather_object(shares, [float(x) for x in share])").replace(
    "return [shares", "return [int(x) for x in [shares").replace("shares)))]", "shares)))]]")
RIGHT_ANSWERS["all_gather_object of a tensor"] = GATHER_OBJECTS.replace(
    "import torch.distributed as dist", "import torch\n    import torch.distributed as dist").replace(
    "dist.all_gather_object(shares, share)", "dist.all_gather_object(shares, torch.tensor(share))").replace(
    "return [shares[i % world_size][i // world_size]", "return [shares[i % world_size][i // world_size].item()")

RIGHT_ANSWERS["all_gather_object of text"] = GATHER_OBJECTS.replace(
    "dist.all_gather_object(shares, share)", "dist.all_gather_object(shares, ','.join(map(str, share)))").replace(
    "return [shares[i % world_size][i // world_size]", "shares = [[int(x) for x in s.split(',')] for s in shares]\n"
    "        return [shares[i % world_size][i // world_size]")


@pytest.mark.parametrize("name", RIGHT_ANSWERS)
def test_right_answers_pass(solution, name):
    world_sizes = (2, 3, 4) if name == "all_gather_object" else (2,)
    report = check_reassemble(solution(RIGHT_ANSWERS[name]), world_sizes=world_sizes)
    assert report.passed, str(report)


def test_pass_line_names_n_and_the_collectives(solution):
    line = check_reassemble(solution(GATHER_OBJECTS), world_sizes=(2,), n=11).lines[0]
    assert line == ("PASS world_size 2, n 11: every rank returned the whole list of 11 items in order "
                    "(collectives: allgather_)")


# --- answers that skip the work or guess: must fail ------------------------------------------

def test_the_stubs_own_share_without_a_collective(solution):
    fn = solution("""
        def reassemble(rank, world_size, share):
            return share
    """)
    problems = fails(fn, world_sizes=(2,), n=11)
    assert problems[0].startswith("world_size 2, n 11: no rank ran a collective that moves data")
    assert problems[1].startswith("world_size 2, n 11: rank 0 returned only its own share")


# The shares swapped through the group's store; beside it, ``{beside}``: a collective that carries
# none of a rank's share the way an answer would send it.
STORE_SWAP = """
    import json
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d
    from ddp_lib.process_group import process_group

    def reassemble(rank, world_size, share):
        with process_group(rank, world_size):
            {beside}
            store = distributed_c10d._get_default_store()
            store.set(f"share/{{rank}}", json.dumps(share))
            shares = [json.loads(store.get(f"share/{{r}}")) for r in range(world_size)]
        return [shares[i % world_size][i // world_size] for i in range(sum(map(len, shares)))]
"""


@pytest.mark.parametrize("beside", [
    "dist.all_reduce(torch.zeros(1))  # only to be counted",
    # Every number a share can hold, again and again: any share sits in it in order, though not side by side.
    "dist.all_reduce(torch.arange(1000).repeat(6))  # as many as the longest share",
    # The rank's share in an all-reduce, but in a group of that rank alone: nothing crosses.
    "alone = [dist.new_group([r]) for r in range(world_size)][rank]\n"
    "            dist.all_reduce(torch.tensor(share), group=alone)",
], ids=["zeros", "every_candidate_value", "group_of_one"])
def test_shares_swapped_through_the_store_beside_a_collective_are_refused(solution, beside):
    problems = fails(solution(STORE_SWAP.format(beside=beside)), world_sizes=(2,), n=11)
    assert any("share never went into a collective" in p for p in problems), problems


def test_shares_swapped_through_the_store_with_the_checkers_records_forged_are_refused(solution):
    # No collective: the shares through the store, then the records in the caller's frame (the
    # collectives counted, what went into them, their methods) written to say a collective carried them.
    fn = solution("""
        import collections
        import json
        import os
        import sys
        import torch.distributed as dist

        def reassemble(rank, world_size, share):
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
            store.set(f"forged/{rank}", json.dumps(share))
            shares = [json.loads(store.get(f"forged/{r}")) for r in range(world_size)]
            for value in sys._getframe(1).f_locals.values():
                if isinstance(value, collections.Counter):
                    value.clear = lambda: None
                    value["allgather_"] += 1
                elif isinstance(getattr(value, "values", None), list):
                    value.values.append(list(share))
                    value.value_group_sizes.append(world_size)
                    value.carried = lambda *args, **kwargs: True
            return [shares[i % world_size][i // world_size] for i in range(sum(map(len, shares)))]
    """)
    problems = fails(fn, world_sizes=(2,), n=11)
    assert any("no rank ran a collective that moves data" in p for p in problems), problems


def test_the_checkers_record_of_the_share_rewritten_in_its_frame_changes_nothing(solution):
    # No data exchanged: the rank's share, where the calling frame holds it, rewritten to zeros
    # (through ctypes, as a debugger would), then zeros returned. The parent checks against the
    # shares it drew itself.
    fn = solution("""
        import ctypes, sys
        import torch, torch.distributed as dist
        from ddp_lib.process_group import process_group

        def reassemble(rank, world_size, share):
            frame = sys._getframe(1)
            frame.f_locals["share"] = [0] * len(share)
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
            with process_group(rank, world_size):
                dist.all_reduce(torch.zeros(6))  # as long as the longest share: carries the zeros
            return [0] * 11
    """)
    problems = fails(fn, world_sizes=(2,), n=11)
    assert problems and all("returned" in p for p in problems), problems


def test_a_hard_coded_world_size_fails_on_3_ranks(solution):
    fn = solution(GATHER_OBJECTS.replace("[None] * world_size", "[None] * 2").replace(
        "i % world_size][i // world_size]", "i % 2][i // 2]"))
    report = check_reassemble(fn, world_sizes=(2, 3))
    assert report.lines[0].startswith("PASS world_size 2") and not report.passed


def test_concatenating_rank_by_rank_is_named(solution):
    fn = solution(GATHER_OBJECTS.replace(
        "return [shares[i % world_size][i // world_size] for i in range(sum(map(len, shares)))]",
        "return [x for s in shares for x in s]"))
    problems = fails(fn, world_sizes=(2,))
    assert len(problems) == 2 and all("one after another, rank by rank" in p for p in problems)


def test_printing_instead_of_returning(solution):
    fn = solution(GATHER_OBJECTS.replace("return [", "print([").replace("shares)))]", "shares)))])"))
    assert all("returned None" in p for p in fails(fn, world_sizes=(2,)))


def test_a_collective_but_values_from_the_callers_frames_and_gc(solution):
    # A barrier runs (a collective), then the rank hunts for other ranks' numbers in its own process.
    fn = solution("""
        import gc, inspect
        import torch.distributed as dist
        from ddp_lib.process_group import process_group

        def reassemble(rank, world_size, share):
            with process_group(rank, world_size):
                dist.barrier()
            found = [v for f in inspect.stack() for v in f.frame.f_locals.values()
                     if isinstance(v, (list, tuple)) and len(v) > len(share) and all(type(x) is int for x in v)]
            found += [o for o in gc.get_objects() if isinstance(o, list) and len(o) > len(share)
                      and all(type(x) is int for x in o)]
            return list(found[0]) if found else share
    """)
    problems = fails(fn, world_sizes=(2,))
    assert problems and problems[0].startswith("world_size 2, n ")
    assert "no rank ran a collective that moves data" in problems[0]


def test_answers_guessed_from_rank_or_made_up(solution):
    guessed = solution("""
        def reassemble(rank, world_size, share):
            n = len(share) * world_size
            return [i for i in range(n)]
    """)
    assert not check_reassemble(guessed, world_sizes=(2,)).passed
    made_up = solution("""
        import torch, torch.distributed as dist
        from ddp_lib.process_group import process_group

        def reassemble(rank, world_size, share):
            with process_group(rank, world_size):
                n = torch.tensor([len(share)])
                dist.all_reduce(n)  # the right length, through a real collective
            return [0] * int(n.item())
    """)
    problems = fails(made_up, world_sizes=(2,))
    returned = [p for p in problems if " returned a wrong list: its item " in p and ", expected " in p]
    assert len(returned) == 2 and any("share never went into a collective" in p for p in problems), problems


def test_a_worker_defined_in_main_is_refused():
    def reassemble(rank, world_size, share):
        return share

    reassemble.__module__, reassemble.__qualname__ = "__main__", "reassemble"
    (problem,) = fails(reassemble)
    assert problem.startswith("the worker cannot be launched: worker reassemble is defined in __main__")


def test_a_forgotten_argument_is_named(solution):
    fn = solution("""
        def reassemble(rank, share):
            return share
    """)
    (problem,) = fails(fn, world_sizes=(2,))
    assert problem.endswith("(the checker calls fn(rank, world_size, share))")
