"""Lesson 01's checker on real ranks: right answers written differently from the solution (ReduceOp.AVG too)
pass on 2 and 3 ranks; each mistake learners make is refused with its fix named."""

import pytest
import torch
from answer_files import load_answer

from ddp_lib.exercises.lesson01 import (
    check_batch_swap,
    check_mean_across_ranks,
    check_reduce_max_to_2,
    check_ring_all_gather,
    check_sum_in_my_half,
)

HEAD = """
import torch
import torch.distributed as dist
from ddp_lib.process_group import process_group

def mean_across_ranks(rank, world_size, x):
    with process_group(rank, world_size) as device:
"""
RIGHT = {
    "divides_first_imported_name": """
        from torch.distributed import all_reduce
        t = torch.full((1,), x / world_size, dtype=torch.float64, device=device)
        all_reduce(t)
        return float(t)
""",
    "waits_on_async": """
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True).wait()
        return t.item() / dist.get_world_size()
""",
    "op_avg_returns_a_tensor": """
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t
""",
}
WRONG = {
    "constant_divisor": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t)
        return (t / 2).item()
""", "FAIL world_size 3", "the sum divided by 2, a constant: divide by world_size"),
    "to_rank_on_cpu": ("""
        t = torch.tensor([x]).to(rank)
        dist.all_reduce(t)
        return (t / world_size).item()
""", "FAIL world_size 2: rank 0 raised RuntimeError", "put tensors on the `device` the lesson provides"),
    "max_op": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()
""", "FAIL world_size 2", "an all-reduce ran, but with op=MAX"),
    "gather_then_mean": ("""
        everyone = [torch.zeros(1) for _ in range(world_size)]
        dist.all_gather(everyone, torch.tensor([x]))
        return torch.cat(everyone).mean().item()
""", "FAIL world_size 2", "combined their values with all_gather; the exercise is dist.all_reduce"),
    "no_wait": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, async_op=True)
        return t.item() / world_size
""", "FAIL world_size 2", "call .wait() on the Work it returns"),
    "avg_then_divided": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t.item() / world_size
""", "FAIL world_size 2", "divided by world_size twice"),
    "sum_not_mean": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t)
        return t.item()
""", "FAIL world_size 2", "the sum over ranks: divide by world_size"),
    "floor_division": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t)
        return t.item() // world_size
""", "FAIL world_size 2", "a whole number for a mean of"),
    "own_value": ("""
        return x
""", "FAIL world_size 2", "no collective ran"),
}


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right01_{case}", HEAD + RIGHT[case], "mean_across_ranks")
    report = check_mean_across_ranks(answer)
    assert report.passed and len(report.lines) == 2, str(report)


def test_a_returned_tensor_passes_with_a_note_and_a_float_without(tmp_path, monkeypatch):
    tensor = load_answer(tmp_path, monkeypatch, "right01_tensor_note", HEAD + RIGHT["op_avg_returns_a_tensor"],
                         "mean_across_ranks")
    report = check_mean_across_ranks(tensor, world_sizes=(2,))
    assert report.passed and ".item() gives the float" in str(report), str(report)
    number = load_answer(tmp_path, monkeypatch, "right01_float_no_note", HEAD + RIGHT["waits_on_async"],
                         "mean_across_ranks")
    report = check_mean_across_ranks(number, world_sizes=(2,))
    assert report.passed and ".item()" not in str(report), str(report)


@pytest.mark.parametrize("case", sorted(WRONG))
def test_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, refusal, hint = WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong01_{case}", HEAD + body, "mean_across_ranks")
    report = check_mean_across_ranks(answer, world_sizes=(3,) if "3" in refusal else (2,))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(refusal) and hint in fails[0], str(report)


# The exercise accepts a plain torch worker too, as the tutorial writes one, without the project's helper.
PLAIN = """
import torch
import torch.distributed as dist

def mean_across_ranks(rank, world_size, x):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.tensor([float(x)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item() / world_size
"""


def test_a_plain_init_process_group_worker_passes(tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, "right01_plain", PLAIN, "mean_across_ranks")
    report = check_mean_across_ranks(answer)
    assert report.passed and len(report.lines) == 2, str(report)


def test_a_plain_worker_that_sets_master_addr_is_told_to_leave_it(tmp_path, monkeypatch):
    sets_addr = '    import os\n    os.environ["MASTER_ADDR"] = "localhost"\n'  # as the tutorial's setup() does
    setup = PLAIN.replace('    dist.init_process_group(', sets_addr + '    dist.init_process_group(')
    answer = load_answer(tmp_path, monkeypatch, "wrong01_sets_master_addr", setup, "mean_across_ranks")
    report = check_mean_across_ranks(answer, world_sizes=(2,))
    assert not report.passed and "leave MASTER_ADDR/MASTER_PORT alone" in str(report), str(report)

def test_the_drawn_values_never_have_a_whole_mean():
    # floor division passed the checker on 58.4 and 41.6 (mean 50): the draw now avoids whole means
    from ddp_lib.exercises.lesson01 import _values_with_fractional_means

    for _ in range(2000):
        values = _values_with_fractional_means((2, 3))
        assert not any((sum(values[:n]) / n).is_integer() for n in (2, 3))


# Exercise 5: sum_in_my_half(rank, world_size, x), the sum over the even or the odd ranks, in a subgroup.
HALVES_HEAD = HEAD.replace("def mean_across_ranks(", "def sum_in_my_half(")
HALVES_RIGHT = {
    "one_group_per_half_in_a_loop": """
        groups = [dist.new_group([r for r in range(world_size) if r % 2 == half]) for half in (0, 1)]
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, group=groups[rank % 2])
        return t
""",
    "new_subgroups_by_enumeration": """
        mine, _ = dist.new_subgroups_by_enumeration([list(range(0, world_size, 2)), list(range(1, world_size, 2))])
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, group=mine)
        return float(t)
""",
}
HALVES_WRONG = {
    "no_group": ("""
        t = torch.tensor([x], device=device)
        dist.all_reduce(t)
        return t.item()
""", "made no subgroup"),
    "groups_made_but_not_passed": ("""
        evens, odds = dist.new_group(list(range(0, world_size, 2))), dist.new_group(list(range(1, world_size, 2)))
        t = torch.tensor([x], device=device)
        dist.all_reduce(t)
        return t.item()
""", "pass group= its own half's group to all_reduce"),
    "the_other_half": ("""
        evens, odds = dist.new_group(list(range(0, world_size, 2))), dist.new_group(list(range(1, world_size, 2)))
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, group=odds if rank % 2 == 0 else evens)
        return t.item()
""", "ran in a group it is not in"),
    "a_list": ("""
        evens, odds = dist.new_group(list(range(0, world_size, 2))), dist.new_group(list(range(1, world_size, 2)))
        t = torch.tensor([x], device=device)
        dist.all_reduce(t, group=evens if rank % 2 == 0 else odds)
        return t.tolist()
""", "returned a list: return the sum as a float"),
}


def test_exercise5_the_solution_passes():
    from ddp_lib.exercises.solutions.lesson01 import sum_in_my_half

    report = check_sum_in_my_half(sum_in_my_half)
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("case", sorted(HALVES_RIGHT))
def test_exercise5_right_answers_written_differently_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right01_halves_{case}", HALVES_HEAD + HALVES_RIGHT[case],
                         "sum_in_my_half")
    report = check_sum_in_my_half(answer)
    assert report.passed, str(report)


@pytest.mark.parametrize("case", sorted(HALVES_WRONG))
def test_exercise5_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, hint = HALVES_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong01_halves_{case}", HALVES_HEAD + body, "sum_in_my_half")
    report = check_sum_in_my_half(answer)
    assert not report.passed and hint in str(report), str(report)


def test_exercise5_asks_for_the_worker_first():
    report = check_sum_in_my_half(None)
    assert not report.passed and "set halves_worker" in str(report)


# Exercise 2: reduce with MAX to rank 2 on 4 ranks. Records as a worker returning mine.tolist() gives them.
_MAX = [31, 32, 33, 34]
_SCRATCH_RUN = [[31, 32, 3, 4], _MAX, _MAX, _MAX]  # what gloo left on this machine's run


@pytest.mark.parametrize(("answer", "run"), [
    ([2], _SCRATCH_RUN),
    (2, [[float(v) for v in t] for t in _SCRATCH_RUN]),  # one int, and float lists
    ((2,), [torch.tensor(t) for t in _SCRATCH_RUN]),  # a tuple, and tensors returned as they are
])
def test_exercise2_right_answers_written_differently_pass(answer, run):
    assert check_reduce_max_to_2(answer, run).startswith("Right")


@pytest.mark.parametrize(("answer", "run", "said"), [
    (None, _SCRATCH_RUN, "set trusted_ranks"),
    ("rank 2", _SCRATCH_RUN, "expected a list of rank numbers"),
    ([2], None, "set run_max"),
    ([2], _SCRATCH_RUN[:3], "run your worker on 4 ranks"),
    ([2], [{"rank": r} for r in range(4)], "return mine.tolist()"),
    ([2], [[1, 2, 3, 4], [11, 12, 13, 14], [64, 68, 72, 76], [31, 32, 33, 34]], "Pass op=dist.ReduceOp.MAX"),
    ([2], [_MAX, [11, 12, 13, 14], [21, 22, 23, 24], _MAX], "Pass dst=2"),
    ([2], [[1, 2, 3, 4]] * 4, "not the maximum"),
    ([1, 2, 3], _SCRATCH_RUN, "only by chance"),
    ([0, 2], _SCRATCH_RUN, "which is not the maximum"),
    ([3], _SCRATCH_RUN, "rank 2 is dst"),
])
def test_exercise2_mistakes_get_their_fix(answer, run, said):
    report = check_reduce_max_to_2(answer, run)
    assert said in report and not report.startswith("Right"), report


REDUCE_MAX = """
import torch.distributed as dist
from ddp_lib.process_group import process_group
from ddp_lib.workers.shared import start_tensor

def reduce_max_to_2(rank, world_size):
    with process_group(rank, world_size) as device:
        mine = start_tensor(rank, world_size, device)
        dist.reduce(mine, dst=2, op=dist.ReduceOp.MAX)
        return mine.tolist()
"""


def test_exercise2_reads_a_real_run(tmp_path, monkeypatch, free_master_port):
    import ddp_lib.mp

    worker = load_answer(tmp_path, monkeypatch, "right01_reduce_max", REDUCE_MAX, "reduce_max_to_2")
    run = ddp_lib.mp.labelled_spawn(worker, args=(4,), nprocs=4)
    assert check_reduce_max_to_2([2], run).startswith("Right")


# Exercise 3: the swap with batch_isend_irecv, on 2 real ranks.
SWAP_HEAD = """
import torch
import torch.distributed as dist
from ddp_lib.process_group import process_group

def swap_batched(rank, world_size, numel):
    with process_group(rank, world_size) as device:
        mine = torch.full((numel,), float(rank), device=device)
        received = torch.empty_like(mine)
"""
SWAP_RIGHT = {
    "waits_in_a_loop": """
        peer = 1 - rank
        ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, received, peer)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return received
""",
    "receive_listed_first_returns_a_list": """
        from torch.distributed import P2POp, batch_isend_irecv, irecv, isend
        requests = batch_isend_irecv([P2POp(irecv, received, (rank + 1) % 2), P2POp(isend, mine, (rank + 1) % 2)])
        [r.wait() for r in requests]
        return received.tolist()
""",
    "waits_last_first": """
        requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank),
                                           dist.P2POp(dist.irecv, received, 1 - rank)])
        while requests:
            requests.pop().wait()
        return received
""",
}
SWAP_WRONG = {
    "isend_and_recv": ("""
        request = dist.isend(mine, 1 - rank)
        dist.recv(received, 1 - rank)
        request.wait()
        return received
""", "the ranks used isend, recv; the exercise is one dist.batch_isend_irecv"),
    "returns_its_own": ("""
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank),
                                         dist.P2POp(dist.irecv, received, 1 - rank)]):
            r.wait()
        return mine
""", "returned its own values: return the tensor that irecv filled"),
    "sends_to_itself": ("""
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, rank),
                                         dist.P2POp(dist.irecv, received, rank)]):
            r.wait()
        return received
""", "not itself"),
    # No wait(): the data may still arrive before the checker reads it, so the missing wait itself is refused.
    "never_waits": ("""
        dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank), dist.P2POp(dist.irecv, received, 1 - rank)])
        return received
""", "never waited on 2 of the 2 requests batch_isend_irecv returned: call .wait()"),
    # Rank 0's own values are zeros, as this unfilled buffer is: the fix is the wait, not "return received".
    "copies_before_any_wait": ("""
        received = torch.zeros_like(mine)
        dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank), dist.P2POp(dist.irecv, received, 1 - rank)])
        return received.clone()
""", "call .wait() on every one"),
    "waits_only_on_the_receive": ("""
        requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank),
                                           dist.P2POp(dist.irecv, received, 1 - rank)])
        requests[1].wait()
        return received
""", "never waited on 1 of the 2 requests"),
    "returns_another_tensor": ("""
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank),
                                         dist.P2POp(dist.irecv, received, 1 - rank)]):
            r.wait()
        return torch.zeros_like(mine)
""", "return the tensor you passed to dist.irecv"),
    "returns_nothing": ("""
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank),
                                         dist.P2POp(dist.irecv, received, 1 - rank)]):
            r.wait()
""", "returned a NoneType"),
}


@pytest.mark.parametrize("case", sorted(SWAP_RIGHT))
def test_batch_swap_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"swap01_{case}", SWAP_HEAD + SWAP_RIGHT[case], "swap_batched")
    report = check_batch_swap(answer)
    assert report.passed and len(report.lines) == 1, str(report)


@pytest.mark.parametrize("case", sorted(SWAP_WRONG))
def test_batch_swap_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, hint = SWAP_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"swapwrong01_{case}", SWAP_HEAD + body, "swap_batched")
    report = check_batch_swap(answer, timeout=10)
    assert not report.passed and len(report.lines) == 1 and hint in report.lines[0], str(report)


def test_batch_swap_unset_is_one_fail_line():
    report = check_batch_swap(None)
    assert not report.passed and len(report.lines) == 1 and "set swap_worker" in report.lines[0]


# Exercise 4: ring_all_gather from isend/recv on 3 real ranks, and the bytes one rank sends.
RING_HEAD = """
import torch
import torch.distributed as dist

def ring_all_gather(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = [torch.empty_like(tensor) for _ in range(world_size)]
    chunks[rank].copy_(tensor)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
"""
RING_RIGHT = {
    "isend_then_recv": """
    for step in range(world_size - 1):
        request = dist.isend(chunks[(rank - step) % world_size], right)
        dist.recv(chunks[(rank - step - 1) % world_size], left)
        request.wait()
    return chunks
""",
    "even_ranks_send_first_tuple": """
    for step in range(world_size - 1):
        out, into = chunks[(rank - step) % world_size], chunks[(rank - step - 1) % world_size]
        if rank % 2 == 0:
            dist.send(out, right)
            dist.recv(into, left)
        else:
            received = torch.empty_like(tensor)
            dist.recv(received, left)
            dist.send(out, right)
            into.copy_(received)
    return tuple(chunks)
""",
}
RING_WRONG = {
    "all_reduce_start": ("""
    for step in range(world_size - 1):
        request = dist.isend(chunks[(rank + 1 - step) % world_size], right)
        dist.recv(chunks[(rank - step) % world_size], left)
        request.wait()
    return chunks
""", "differ from dist.all_gather's: rank r starts owning chunk r"),
    "built_in": ("""
    dist.all_gather(chunks, tensor)
    return chunks
""", "called dist.all_gather; build it from dist.isend and dist.recv only"),
    "returns_one_tensor": ("""
    return torch.cat(chunks)
""", "returned a Tensor: return the list of world_size chunks"),
}


@pytest.mark.parametrize("case", sorted(RING_RIGHT))
def test_ring_all_gather_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"ring01_{case}", RING_HEAD + RING_RIGHT[case], "ring_all_gather")
    report = check_ring_all_gather(answer, 8000 if case == "isend_then_recv" else 8e3)
    assert report.passed and len(report.lines) == 2, str(report)
    assert "half of section 9's ring all-reduce of the gathered 12000-byte tensor" in report.lines[1], str(report)
    assert "= 16000" in report.lines[1], str(report)


@pytest.mark.parametrize("case", sorted(RING_WRONG))
def test_ring_all_gather_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, hint = RING_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"ringwrong01_{case}", RING_HEAD + body, "ring_all_gather")
    report = check_ring_all_gather(answer, 8000)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and hint in fails[0], str(report)


@pytest.mark.parametrize("bytes_each, hint", [
    (None, "set bytes_each"), ("8000 bytes", "not a number"), (12000, "own chunk too"), (4000, "one step"),
    (16000 / 3, "all-reduce's figure"), (5333, "all-reduce's figure"), (5334, "all-reduce's figure"),
    (64000, "counts bits"), (2000, "each of the 2 steps"),
], ids=["unset", "a_string", "own_chunk", "one_step", "all_reduce", "all_reduce_rounded_down",
        "all_reduce_rounded_up", "bits", "other"])
def test_ring_all_gather_byte_mistakes_are_named(bytes_each, hint, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, "ringbytes01", RING_HEAD + RING_RIGHT["isend_then_recv"],
                         "ring_all_gather")
    report = check_ring_all_gather(answer, bytes_each)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and hint in fails[0], str(report)


def test_ring_all_gather_unset_is_one_fail_line():
    report = check_ring_all_gather(None, None)
    assert not report.passed and len(report.lines) == 1 and "set ring_worker" in report.lines[0]
