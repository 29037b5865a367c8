"""Lesson 04's checker (average the gradients by hand): right answers written several ways pass,
and answers that skip the collective, hard-code the world size or fetch values they should not
see are refused."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from ddp_lib.exercises.lesson04 import check_average_gradients

RIGHT = {
    "dist_all_reduce": """
        import torch.distributed as dist

        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
        """,
    "c10d_imported_names": """
        from torch.distributed import get_world_size
        from torch.distributed.distributed_c10d import all_reduce

        def average_gradients(model):
            for p in model.parameters():
                p.grad.div_(get_world_size())
                all_reduce(p.grad)
        """,
    "reduce_op_avg": """
        import torch.distributed as dist

        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        """,
    "process_group_method": """
        import torch.distributed as dist

        def average_gradients(model):
            group = dist.group.WORLD
            for p in model.parameters():
                p.grad /= group.size()
                group.allreduce([p.grad]).wait()
        """,
    "all_gather_then_mean": """
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            for p in model.parameters():
                everyone = [torch.empty_like(p.grad) for _ in range(dist.get_world_size())]
                dist.all_gather(everyone, p.grad)
                p.grad.copy_(torch.stack(everyone).mean(0))
        """,
    "one_flat_async_all_reduce": """
        import torch
        from torch.distributed import all_reduce, get_world_size

        def average_gradients(model):
            grads = [p.grad for p in model.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])  # one message, as a DDP bucket
            all_reduce(flat, async_op=True).wait()
            flat /= get_world_size()
            torch.nn.utils.vector_to_parameters(flat, grads)
        """,
    "all_gather_object": """
        import torch.distributed as dist

        def average_gradients(model):
            grads = [p.grad for p in model.parameters()]
            everyone = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, grads)  # pickled: the values travel as bytes
            for i, g in enumerate(grads):
                g.copy_(sum(e[i] for e in everyone) / len(everyone))
        """,
    "reduce_scatter_then_all_gather": """
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            world_size = dist.get_world_size()
            grads = [p.grad for p in model.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])
            pad = -flat.numel() % world_size
            flat = torch.cat([flat, flat.new_zeros(pad)])
            shard = flat.new_empty(flat.numel() // world_size)
            dist.reduce_scatter_tensor(shard, flat)
            everyone = torch.empty_like(flat)
            dist.all_gather_into_tensor(everyone, shard / world_size)
            torch.nn.utils.vector_to_parameters(everyone[:everyone.numel() - pad], grads)
        """,
    "functional_collective": """
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol

        def average_gradients(model):
            for p in model.parameters():
                p.grad.copy_(funcol.all_reduce(p.grad, "avg", dist.group.WORLD))
        """,
}

# An attack on the records of collective inputs, as first found: the gradients through the store,
# one real all-reduce of zeros, then every CollectiveInputs found through gc extended in place.
ATTACK_EXTENDING_THE_RECORD = """
    import gc
    import pickle

    import torch
    import torch.distributed as dist

    def average_gradients(model):
        r, w = dist.get_rank(), dist.get_world_size()
        store = dist.distributed_c10d._get_default_store()
        params = list(model.parameters())
        store.set(f"adv/{r}", pickle.dumps([p.grad.detach().cpu().clone() for p in params]))
        dist.all_reduce(torch.zeros(1))  # carries nothing
        for obj in gc.get_objects():
            if type(obj).__name__ == "CollectiveInputs" and obj.values:
                for p in params:
                    obj.values.append(p.grad.reshape(-1).tolist())
                    obj.value_group_sizes.append(w)
                    obj.by_op.append(("allreduce_", obj.values[-1]))
        everyone = [pickle.loads(store.get(f"adv/{k}")) for k in range(w)]
        for i, p in enumerate(params):
            p.grad.copy_(sum(g[i] for g in everyone) / w)
    """


def _store_average_beside_zeros(forgery: str) -> str:
    """An answer that averages the gradients through the store beside an all-reduce of zeros, then
    calls ``forged_collectives.<forgery>`` to make the checker's records say the gradients went
    into that all-reduce."""
    return f"""
        import io
        import torch
        import torch.distributed as dist
        from torch.distributed import distributed_c10d
        from forged_collectives import {forgery}

        def average_gradients(model):
            store = distributed_c10d._get_default_store()
            rank, world_size = dist.get_rank(), dist.get_world_size()
            buffer = io.BytesIO()
            torch.save([p.grad for p in model.parameters()], buffer)
            store.set(f"grads{{rank}}", buffer.getvalue())
            dist.all_reduce(torch.zeros(1))
            assert {forgery}("c10d::allreduce_", [p.grad for p in model.parameters()])
            everyone = [torch.load(io.BytesIO(store.get(f"grads{{r}}"))) for r in range(world_size)]
            for i, p in enumerate(model.parameters()):
                p.grad.copy_(sum(g[i] for g in everyone) / world_size)
        """

WRONG = {
    "hard_coded_two": ("""
        import torch.distributed as dist

        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= 2
        """, "world_size 3: on 3 ranks every gradient is divided by 2"),
    "no_division": ("""
        import torch.distributed as dist

        def average_gradients(model):
            for p in model.parameters():
                dist.all_reduce(p.grad)
        """, "every gradient is 2 times too large"),
    "reduce_to_rank_0": ("""
        import torch.distributed as dist

        def average_gradients(model):
            for p in model.parameters():
                p.grad /= dist.get_world_size()
                dist.reduce(p.grad, dst=0)
        """, "rank 0 is right but rank(s) [1] are not"),
    "made_up_numbers_no_collective": ("""
        import torch

        def average_gradients(model):
            for p in model.parameters():
                p.grad.copy_(torch.randn_like(p.grad) * p.grad.std())
        """, "ran no collective"),
    "barrier_then_nothing": ("""
        import torch.distributed as dist

        def average_gradients(model):
            dist.barrier()
        """, "ran no collective that moves data (a barrier only waits)"),
    "empty_all_reduce_then_nothing": ("""
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            dist.all_reduce(torch.zeros(1))
        """, "the gradients are unchanged"),
    "copied_from_a_ddp_model_found_by_gc": ("""
        import gc
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        def average_gradients(model):
            dist.all_reduce(torch.zeros(1))  # a collective that moves data, so only the values can give it away
            for obj in gc.get_objects():
                if isinstance(obj, DistributedDataParallel):
                    for mine, theirs in zip(model.parameters(), obj.module.parameters()):
                        mine.grad.copy_(theirs.grad)
        """, "the gradients are unchanged"),
    "read_from_callers_frames": ("""
        import inspect
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            dist.all_reduce(torch.zeros(1))
            for frame in inspect.stack():
                expected = frame.frame.f_locals.get("expected")
                if isinstance(expected, dict):
                    for name, p in model.named_parameters():
                        p.grad.copy_(expected[name])
        """, "the gradients are unchanged"),
    "read_from_sys_getframe": ("""
        import sys
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            dist.all_reduce(torch.zeros(1))
            frame = sys._getframe(1)
            while frame is not None:  # any tensor-valued local up the stack that has the right shape
                for value in frame.f_locals.values():
                    for p in model.parameters():
                        if isinstance(value, torch.Tensor) and value.shape == p.grad.shape and value is not p.grad:
                            p.grad.copy_(value)
                frame = frame.f_back
        """, "the gradients are unchanged"),
    "guessed_from_rank": ("""
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            dist.all_reduce(torch.zeros(1))
            # The other ranks' data is random: a guess seeded by rank has the right shape only.
            generator = torch.Generator().manual_seed(dist.get_rank())
            for p in model.parameters():
                p.grad.add_(torch.randn(p.grad.shape, generator=generator) * p.grad.std()).div_(2)
        """, "these parameters do not hold the average"),
    "batch_rewritten_through_frames": ("""
        import sys

        import torch
        import torch.distributed as dist
        from torch import nn

        def average_gradients(model):
            # Zero this rank's private batch in the caller's frame, so that every rank's own
            # gradient is the same; recompute it; the all-reduce carries none of it.
            caller = sys._getframe(1)
            caller.f_locals["x"].zero_()
            caller.f_locals["y"].zero_()
            model.zero_grad()
            nn.functional.mse_loss(model(caller.f_locals["x"]), caller.f_locals["y"]).backward()
            dist.all_reduce(torch.zeros(1))
        """, "these parameters do not hold the average"),
    "gradients_through_the_store_beside_a_barrier": ("""
        import io
        import torch
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        def average_gradients(model):
            store = distributed_c10d._get_default_store()
            rank, world_size = dist.get_rank(), dist.get_world_size()
            buffer = io.BytesIO()
            torch.save([p.grad for p in model.parameters()], buffer)
            store.set(f"grads{rank}", buffer.getvalue())
            dist.barrier()  # a collective, but it carries nothing
            everyone = [torch.load(io.BytesIO(store.get(f"grads{r}"))) for r in range(world_size)]
            for i, p in enumerate(model.parameters()):
                p.grad.copy_(sum(g[i] for g in everyone) / world_size)
        """, "ran no collective that moves data"),
    "gradients_through_the_store_beside_an_empty_all_reduce": ("""
        import io
        import torch
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        def average_gradients(model):
            store = distributed_c10d._get_default_store()
            rank, world_size = dist.get_rank(), dist.get_world_size()
            buffer = io.BytesIO()
            torch.save([p.grad for p in model.parameters()], buffer)
            store.set(f"grads{rank}", buffer.getvalue())
            dist.all_reduce(torch.zeros(1))  # carries data, but none of the gradients
            everyone = [torch.load(io.BytesIO(store.get(f"grads{r}"))) for r in range(world_size)]
            for i, p in enumerate(model.parameters()):
                p.grad.copy_(sum(g[i] for g in everyone) / world_size)
        """, "gave no collective their own gradients"),
    # The gradients through the store beside an all-reduce that carries none of them; then every
    # dict in the callers' frames emptied, so that a record of this rank's own gradients kept there
    # would say nothing was left unsent.
    "store_with_the_callers_records_emptied": ("""
        import io
        import sys
        import torch
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        def average_gradients(model):
            store = distributed_c10d._get_default_store()
            rank, world_size = dist.get_rank(), dist.get_world_size()
            buffer = io.BytesIO()
            torch.save([p.grad for p in model.parameters()], buffer)
            store.set(f"grads{rank}", buffer.getvalue())
            dist.all_reduce(torch.zeros(1))
            everyone = [torch.load(io.BytesIO(store.get(f"grads{r}"))) for r in range(world_size)]
            for i, p in enumerate(model.parameters()):
                p.grad.copy_(sum(g[i] for g in everyone) / world_size)
            frame = sys._getframe(1)
            while frame is not None:
                for value in list(frame.f_locals.values()):
                    if isinstance(value, dict) and value is not frame.f_globals:
                        value.clear()
                frame = frame.f_back
        """, "gave no collective their own gradients"),
    # The batch the rank drew, an immutable local of the checker's frame, rebound through ctypes to
    # zeros on every rank: every rank's gradient is then the same, and computable alone. Refused
    # because those gradients never went into a collective.
    "batch_rebound_through_ctypes": ("""
        import ctypes
        import sys
        import torch
        import torch.distributed as dist
        from torch import nn

        def average_gradients(model):
            frame = sys._getframe(1)
            while "drawn" not in frame.f_locals:
                frame = frame.f_back
            drawn = frame.f_locals["drawn"]
            frame.f_locals["drawn"] = tuple((bytes(len(data)), shape) for data, shape in drawn)
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
            model.zero_grad()
            nn.functional.mse_loss(model(torch.zeros(drawn[0][1])), torch.zeros(drawn[1][1])).backward()
            dist.all_reduce(torch.zeros(1))
        """, "gave no collective their own gradients"),
    # The gradients through the store; the only collective is in a group of this rank alone.
    "store_beside_a_group_of_one": ("""
        import pickle
        import torch
        import torch.distributed as dist

        def average_gradients(model):
            rank, world_size = dist.get_rank(), dist.get_world_size()
            alone = [dist.new_group([r]) for r in range(world_size)][rank]
            params = list(model.parameters())
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat.clone(), group=alone)
            store = dist.distributed_c10d._get_default_store()
            store.set(f"grads/{rank}", pickle.dumps(flat))
            mean = sum(pickle.loads(store.get(f"grads/{r}")) for r in range(world_size)) / world_size
            offset = 0
            for p in params:
                p.grad.copy_(mean[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
        """, "gave no collective their own gradients"),
    # The gradients through the store beside an all-reduce of zeros; then a record saying they went
    # into an all-reduce, added to the checker's records of collective inputs found through gc.
    # Refused: the profiler saw no all-reduce of those shapes, so the record is dropped.
    "collective_inputs_record_forged_through_gc": (_store_average_beside_zeros("forge_inputs"),
        "gave no collective their own gradients"),
    # The gradients through the store beside an all-reduce of zeros; then the record of that real
    # all-reduce, found through gc, extended with the gradients. The attack as first written looked
    # for lists to extend; the records hold tuples, so it finds none and is refused for its store.
    "real_collectives_record_extended_through_gc": (ATTACK_EXTENDING_THE_RECORD,
                                                    "gave no collective their own gradients"),
    # The same, the record swapped whole for one that claims the gradients beside the zeros: it no
    # longer fits its call (one tensor of one element), so it is dropped.
    "real_collectives_record_swapped_for_a_longer_one": (_store_average_beside_zeros("extend_inputs"),
        "gave no collective their own gradients"),
}


def _load(tmp_path, monkeypatch, name: str, source: str):
    """Write a learner's file (as %%writefile would) and return its function."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return importlib.import_module(name).average_gradients


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass_on_2_and_3_ranks(case, tmp_path, monkeypatch):
    report = check_average_gradients(_load(tmp_path, monkeypatch, f"right04_{case}", RIGHT[case]))
    assert report.passed and len(report.lines) == 2, str(report)
    assert report.lines[1] == "PASS on all 3 ranks, all 6 gradients are the mean over the ranks (within 1e-06)"


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_answers_are_refused(case, tmp_path, monkeypatch):
    source, message = WRONG[case]
    report = check_average_gradients(_load(tmp_path, monkeypatch, f"wrong04_{case}", source))
    assert not report.passed and message in str(report), str(report)
