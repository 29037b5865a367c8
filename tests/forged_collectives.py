"""Attacks on the checkers' records of collective inputs, shared by the tests of several checkers:
code in a rank finds, through gc, the list where the checker's dispatch mode keeps what each
collective was given, and changes it. Records it adds, or records it swaps for ones claiming more
data than their call had, must be dropped; a record swapped for one of the same shapes cannot be."""

import gc

import torch.distributed as dist

from ddp_lib.exercises.checking import _flat_shapes, _frozen


def _is_record_list(obj) -> bool:
    return (isinstance(obj, list) and bool(obj)
            and all(isinstance(entry, tuple) and len(entry) == 4 and isinstance(entry[0], str)
                    and entry[0].startswith(("c10d::", "_c10d_functional::")) for entry in obj))


def _record_lists() -> list[list]:
    return [obj for obj in gc.get_objects() if _is_record_list(obj)]


def forge_inputs(operator: str, tensors: list) -> int:
    """Append a record saying ``operator`` (``"c10d::allreduce_"``, ...) was given ``tensors`` over
    the whole world, to every record list found; how many were found (a real collective must have
    run in the block first, so that the list is not empty)."""
    found = _record_lists()
    for records in found:
        records.append((operator, _flat_shapes([tensors]), dist.get_world_size(), _frozen(list(tensors), 1 << 16)))
    return len(found)


def extend_inputs(operator: str, tensors: list) -> int:
    """Swap every record of a real ``operator`` call for one that says it was also given ``tensors``
    (the call's shapes unchanged); how many were swapped."""
    swapped = 0
    for records in _record_lists():
        for i, (name, shapes, _, sent) in enumerate(records):
            if name == operator:
                records[i] = (name, shapes, dist.get_world_size(), sent + _frozen(list(tensors), 1 << 16))
                swapped += 1
    return swapped


def rewrite_inputs(operator: str, values: list) -> int:
    """Swap every record of a real ``operator`` call for one that says each of its tensors held
    ``values`` (what the checkers cannot refuse when the lengths fit: the operator ran, with those
    shapes); how many were swapped."""
    swapped = 0
    for records in _record_lists():
        for i, (name, shapes, size, sent) in enumerate(records):
            if name == operator:
                records[i] = (name, shapes, size, tuple((tuple(values), is_bytes) for _, is_bytes in sent))
                swapped += 1
    return swapped
