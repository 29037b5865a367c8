"""Answers to lesson 00's exercise, right and wrong, for tests/test_exercise00.py (importable
by the launched ranks because they live in a module, not in the test file's functions)."""

import sys

import torch
import torch.distributed as dist
from torch.distributed import all_gather_object

from ddp_lib.process_group import process_group


def right(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def imported_by_name_from_the_group(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * dist.get_world_size()
        all_gather_object(everyone, name)
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "is_main": dist.get_rank() == 0,
                "everyone": everyone}


def no_group(rank, world_size, name):
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": [name]}


def reads_callers_frames(rank, world_size, name):
    # No group: looks for every rank's name in the frames that called it.
    frame, found = sys._getframe(1), [name]
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, list) and len(value) == world_size and all(isinstance(v, str) for v in value):
                found = value
        frame = frame.f_back
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": found}


def main_everywhere(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": True, "everyone": everyone}


def hard_coded_world_size(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * 2
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": 2, "is_main": rank == 0, "everyone": everyone}


def reversed_order(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone[::-1]}


def raises(rank, world_size, name):
    raise RuntimeError("not written yet")


# Right answers written differently: each must pass.

def through_distributed_c10d(rank, world_size, name):
    from torch.distributed import distributed_c10d
    with process_group(rank, world_size):
        everyone = [None] * world_size
        distributed_c10d.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def _name_tensor(name):
    import torch
    return torch.tensor(list(name.encode()), dtype=torch.uint8)


def tensors_through_a_process_group_method(rank, world_size, name):
    # Names of one length as byte tensors, gathered with the ProcessGroup's own method.
    import torch
    with process_group(rank, world_size):
        mine = _name_tensor(name)
        gathered = [[torch.empty_like(mine) for _ in range(world_size)]]
        dist.group.WORLD.allgather(gathered, [mine]).wait()
        everyone = [bytes(t.tolist()).decode() for t in gathered[0]]
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def one_broadcast_per_rank(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = []
        for source in range(world_size):
            box = [name if source == rank else None]
            dist.broadcast_object_list(box, src=source)
            everyone.append(box[0])
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def summed_rows(rank, world_size, name):
    # Each rank fills its own row of a zero matrix; an all-reduce SUM puts every row on every rank.
    import torch
    with process_group(rank, world_size):
        rows = torch.zeros(world_size, len(name), dtype=torch.int64)
        rows[rank] = _name_tensor(name)
        dist.all_reduce(rows, op=dist.ReduceOp.SUM)
        everyone = [bytes(row.tolist()).decode() for row in rows]
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


# Answers that learn the others' names without the process group's collectives: each must fail.

def _gathered_through(store_set, store_get, rank, world_size, name):
    store_set(f"who_am_i/{rank}", name)
    return [store_get(f"who_am_i/{r}") for r in range(world_size)]


def through_files(rank, world_size, name):
    # No group: every rank writes its name to a folder every rank can find (named after the
    # launcher's port, the same for all of them), then waits for the others' files.
    import os
    import shutil
    import time
    folder = os.path.join("/tmp", f"who_am_i-{os.environ['MASTER_PORT']}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{rank}.tmp"), "w") as f:
        f.write(name)
    os.replace(os.path.join(folder, f"{rank}.tmp"), os.path.join(folder, str(rank)))
    paths = [os.path.join(folder, str(r)) for r in range(world_size)]
    while not all(os.path.exists(p) for p in paths):
        time.sleep(0.01)
    everyone = [open(p).read() for p in paths]
    open(os.path.join(folder, f"done{rank}"), "w").close()
    if rank == 0:  # the last to leave the folder removes it, once every rank has read
        while not all(os.path.exists(os.path.join(folder, f"done{r}")) for r in range(world_size)):
            time.sleep(0.01)
        shutil.rmtree(folder)
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def through_the_launchers_store(rank, world_size, name):
    # No group: a client of the rendezvous store at MASTER_ADDR:MASTER_PORT, used as a dictionary.
    import os
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    everyone = _gathered_through(store.set, lambda key: store.get(key).decode(), rank, world_size, name)
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def through_the_groups_store(rank, world_size, name):
    # Joins the group, then uses its store as a dictionary instead of a collective.
    from torch.distributed import distributed_c10d
    with process_group(rank, world_size):
        store = distributed_c10d._get_default_store()
        everyone = _gathered_through(store.set, lambda key: store.get(key).decode(), rank, world_size, name)
        dist.barrier()  # a collective that carries no names
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def through_the_store_beside_an_all_reduce(rank, world_size, name):
    # Swaps the names through the group's store, then runs an all_reduce of zeros only to be counted.
    from torch.distributed import distributed_c10d
    with process_group(rank, world_size):
        store = distributed_c10d._get_default_store()
        everyone = _gathered_through(store.set, lambda key: store.get(key).decode(), rank, world_size, name)
        dist.all_reduce(torch.zeros(1))
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def through_the_store_with_forged_collective_inputs(rank, world_size, name):
    # Swaps the names through the group's store, runs an all_reduce of zeros, then adds to the
    # checker's records (found through gc) that its name went into an all-gather.
    from forged_collectives import forge_inputs
    from torch.distributed import distributed_c10d
    with process_group(rank, world_size):
        store = distributed_c10d._get_default_store()
        everyone = _gathered_through(store.set, lambda key: store.get(key).decode(), rank, world_size, name)
        dist.all_reduce(torch.zeros(1))
        assert forge_inputs("c10d::allgather_", [torch.tensor(list(name.encode()), dtype=torch.uint8)])
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def reads_gc(rank, world_size, name):
    # No group: looks through every object this process holds for the others' names.
    import gc
    found = [name]
    for obj in gc.get_objects():
        if isinstance(obj, list) and len(obj) == world_size and all(isinstance(v, str) for v in obj):
            found = obj
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": found}


def made_up_names(rank, world_size, name):
    # Runs the collective, then returns names of the right shape that it made up (its own in its slot).
    import secrets
    with process_group(rank, world_size):
        dist.all_gather_object([None] * world_size, name)
        everyone = [name if r == rank else secrets.token_hex(4) for r in range(world_size)]
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


class _EqualToAnything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


def equal_to_anything(rank, world_size, name):
    # Sends its own name in a collective (so it is counted as carried), ignores what comes back,
    # and returns a list that claims to equal any answer.
    with process_group(rank, world_size):
        dist.all_reduce(_name_tensor(name))
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": _EqualToAnything()}


# A right answer in another container: must pass.

def tuple_of_names(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": tuple(everyone)}


def names_in_a_string(rank, world_size, name):
    # The names, but joined into one string: not the list the exercise asks for.
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": ",".join(everyone)}


def gathers_within_itself(rank, world_size, name):
    # Gathers its own name in a group of its own (so it reaches nobody) and takes the others'
    # names from the group's store.
    from torch.distributed import distributed_c10d
    with process_group(rank, world_size):
        alone = [dist.new_group([r]) for r in range(world_size)][rank]
        dist.all_gather_object([None], name, group=alone)
        store = distributed_c10d._get_default_store()
        everyone = _gathered_through(store.set, lambda key: store.get(key).decode(), rank, world_size, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def forges_the_checkers_records(rank, world_size, name):
    # No group: names through the launcher's store, then the records in the caller's frame (the
    # collectives counted, what went into them, their methods) written to say a collective carried them.
    import collections
    import os

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    everyone = _gathered_through(store.set, lambda key: store.get(key).decode(), rank, world_size, name)
    for value in sys._getframe(1).f_locals.values():
        if isinstance(value, collections.Counter):
            value.clear = lambda: None
            value["allgather_"] += 1
        elif isinstance(getattr(value, "values", None), list):
            value.raw.append(name.encode())
            value.raw_group_sizes.append(world_size)
            value.carried = lambda *args, **kwargs: True
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
