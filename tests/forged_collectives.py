"""An attack on the checkers' records of collective inputs, shared by the tests of several checkers:
code in a rank finds, through gc, the list where the checker's dispatch mode keeps what each
collective was given, and appends records of its own, exactly as the mode writes them, for tensors
that never went into a collective. The checker must drop them: the profiler saw no operator for them."""

import gc

import torch.distributed as dist

from ddp_lib.exercises.checking import CollectiveInputs, _flat_shapes, _keep


def _is_record_list(obj) -> bool:
    return (isinstance(obj, list) and bool(obj)
            and all(isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[0], str)
                    and entry[0].startswith(("c10d::", "_c10d_functional::")) for entry in obj))


def forge_inputs(operator: str, tensors: list) -> int:
    """Append a record saying ``operator`` (``"c10d::allreduce_"``, ...) was given ``tensors`` over
    the whole world, to every record list found; how many were found (a real collective must have
    run in the block first, so that the list is not empty)."""
    found = [obj for obj in gc.get_objects() if _is_record_list(obj)]
    given = CollectiveInputs()
    _keep(given, operator.split("::")[1], list(tensors), dist.get_world_size(), given.limit)
    for records in found:
        records.append((operator, _flat_shapes([tensors]), given))
    return len(found)


def rewrite_inputs(operator: str, values: list) -> int:
    """Rewrite, in place, the values recorded for every real ``operator`` call so far to ``values``
    (what the checkers cannot refuse: the operator ran, with those shapes); how many were rewritten."""
    rewritten = 0
    for records in (obj for obj in gc.get_objects() if _is_record_list(obj)):
        for name, _, given in records:
            if name == operator:
                for recorded in given.values:
                    recorded[:] = values
                    rewritten += 1
    return rewritten
