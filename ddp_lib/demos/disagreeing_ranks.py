"""Lesson 01's ranks that disagree: a peer that exits while a rank waits in a collective, ranks that
pass tensors of different shapes, ranks that pass one shape in two dtypes of one width (which gloo
does not notice), a rank that skips a new_group, and ranks that leave right after init. Each returns
the error gloo raised, without the parts that change from run to run (source paths, addresses, ports)."""

from __future__ import annotations

import os
import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ddp_lib.demos.missing_rank import torch_cpp_logs_hidden
from ddp_lib.process_group import COLLECTIVE_TIMEOUT, process_group
from ddp_lib.workers.point_to_point import gloo_message


def peer_exits(rank: int, world_size: int, delay: float = 0.5) -> dict | None:
    """Rank 1 exits ``delay`` s after joining, while rank 0 waits for it in an all_reduce. Rank 0
    returns gloo's error and how long it waited, with the group's timeout for comparison."""
    with process_group(rank, world_size):
        if rank == 1:
            time.sleep(delay)  # rank 0 is inside all_reduce by now
            os._exit(0)  # the process ends here: no destroy_process_group, no return value
        start = time.perf_counter()
        try:
            dist.all_reduce(torch.ones(3))
            error = ""
        except RuntimeError as exc:
            error = gloo_message(str(exc))
        return {"rank": rank, "error": error, "waited_s": time.perf_counter() - start,
                "timeout_s": COLLECTIVE_TIMEOUT.total_seconds()}


_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\((.*?)\)[,.)]")
_FIELDS = ("OpType", "TensorShape", "TensorDtypes")


def detail_mismatch(error: str) -> str:
    """What differs between the ranks, in a ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` mismatch error, read from
    the ranks' fingerprints that it prints: "TensorShape: rank 0 [3], rank 1 [4]" (fields joined by "; ").
    "" when ``error`` is not such an error."""
    ranks = [(int(rank), dict(re.findall(r"(\w+)=(.*?)(?=, \w+=|$)", fingerprint)))
             for rank, fingerprint in _FINGERPRINT.findall(error)]
    ranks.sort()
    differs = [field for field in _FIELDS if len({fields.get(field) for _, fields in ranks}) > 1]
    return "; ".join(f"{field}: " + ", ".join(f"rank {rank} {fields.get(field)}" for rank, fields in ranks)
                     for field in differs)


def mismatched_shapes(rank: int, world_size: int, detail: bool = False, numel: int = 3) -> dict:
    """Rank r all-reduces ``[1, 2, ..., numel + r]``: the ranks disagree on the shape. With ``detail``,
    the group is built as under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, the error is returned whole, and
    ``mismatch`` says what differs (``detail_mismatch``). ``unchanged``: the tensor still holds its input.
    ``done_at`` is when this rank's all_reduce returned or raised, on the machine's monotonic clock."""
    if detail:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()  # torch read the variable when this process imported it
    with process_group(rank, world_size):
        mine = torch.arange(1.0, numel + 1 + rank)
        try:
            dist.all_reduce(mine)
            error = ""
        except RuntimeError as exc:
            error = str(exc) if detail else gloo_message(str(exc))
        done_at = time.monotonic()  # one clock for every process of this machine
        return {"rank": rank, "numel": mine.numel(), "after": mine.tolist(), "error": error, "done_at": done_at,
                "mismatch": detail_mismatch(error), "unchanged": mine.tolist() == list(range(1, numel + 1 + rank))}


def mismatched_dtypes(rank: int, world_size: int) -> dict:
    """Rank 0 all-reduces float32 ``[1., 2., 3.]``, every other rank int32 ``[1, 2, 3]``: one shape,
    one width (4 bytes), two dtypes. ``as_other_dtype``: this rank's result read as the other dtype's
    bits, to compare with what the other ranks got."""
    with process_group(rank, world_size):
        mine = torch.tensor([1, 2, 3], dtype=torch.float32 if rank == 0 else torch.int32)
        try:
            dist.all_reduce(mine)
            error = ""
        except RuntimeError as exc:
            error = gloo_message(str(exc))
        other = torch.int32 if rank == 0 else torch.float32
        return {"rank": rank, "dtype": str(mine.dtype).removeprefix("torch."), "after": mine.tolist(),
                "as_other_dtype": mine.view(other).tolist(), "error": error}


def one_element_off(numel: int = 1000) -> dict:
    """Launch ``mismatched_shapes`` on 2 ranks, ``numel`` elements on rank 0 and one more on rank 1,
    with the ranks' output kept aside. ``error``: the launcher's error, as "Class: message" ("" when no
    rank died); ``gloo_says``: the end of each line of rank 0's stderr from "Received data size" on."""
    import contextlib
    import io

    from torch.multiprocessing import ProcessExitedException

    import ddp_lib.mp

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ddp_lib.mp.labelled_spawn(mismatched_shapes, args=(2, False, numel), nprocs=2)
    except ProcessExitedException as exc:  # a rank died without raising; its stderr is kept in exc.outputs
        stderr_0 = exc.outputs[0][1]
        return {"error": f"{type(exc).__name__}: {exc}",
                "gloo_says": [line[line.index("Received"):] for line in stderr_0.splitlines()
                              if "Received data size" in line]}
    return {"error": "", "gloo_says": []}


def skipped_new_group(rank: int, world_size: int, init_barrier: str = "1", timeout_s: float = 2.0) -> dict:
    """Every rank should call ``new_group`` for the evens, then for the odds; rank 1, not an even rank,
    skips the first call. Then each rank all-reduces in its own group. ``init_barrier`` is the value of
    ``TORCH_DIST_INIT_BARRIER`` ("1" as ``process_group`` sets it, "0" torch's default); every wait
    ends after ``timeout_s``. Returns the call this rank stopped in ("" when it got through) and the
    first line of its error, without paths and addresses. Which call fails varies from run to run:
    rank 1's odds take the evens' name, so both groups write the same store keys."""
    os.environ["TORCH_DIST_INIT_BARRIER"] = init_barrier
    timeout = timedelta(seconds=timeout_s)
    with process_group(rank, world_size, timeout=timeout), torch_cpp_logs_hidden():
        call = "new_group(evens)"
        try:
            if rank != 1:  # the mistake: rank 1 skips the call for a group it is not in
                evens = dist.new_group(list(range(0, world_size, 2)), timeout=timeout)
            call = "new_group(odds)"
            odds = dist.new_group(list(range(1, world_size, 2)), timeout=timeout)
            call = "all_reduce"
            dist.all_reduce(torch.ones(1), group=evens if rank % 2 == 0 else odds)
            return {"rank": rank, "stopped_in": "", "error": ""}
        except RuntimeError as exc:
            error = re.sub(r"\[/[^\]]*\]\s*", "", gloo_message(str(exc)))  # "[/path/pair.h:311] " inside it
            return {"rank": rank, "stopped_in": call, "error": error.split(" (")[0]}


def init_then_return(rank: int, world_size: int) -> int:
    """Join with plain torch's default, ``TORCH_DIST_INIT_BARRIER=0``, and return at once: the process
    ends with no collective, no barrier and no ``destroy_process_group``."""
    os.environ["TORCH_DIST_INIT_BARRIER"] = "0"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return rank


def exits_after_init(runs: int = 20, world_size: int = 4) -> dict:
    """Launch ``init_then_return`` ``runs`` times, each on a fresh port, with the ranks' output kept
    aside. ``failed``: how many launches had a rank raise; ``errors``: their errors' first sentences,
    each once."""
    import contextlib
    import io

    import ddp_lib.mp
    from ddp_lib.process_group import free_port

    failed, errors, port = 0, set(), os.environ.get("MASTER_PORT")
    try:
        for _ in range(runs):
            os.environ["MASTER_PORT"] = str(free_port())
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    ddp_lib.mp.labelled_spawn(init_then_return, args=(world_size,), nprocs=world_size)
            except ddp_lib.mp.RankRaisedError as exc:
                failed += 1
                errors.add(gloo_message(str(exc).split(": ", 2)[-1]).split(" (launcher:")[0])
    finally:
        if port is not None:
            os.environ["MASTER_PORT"] = port
    return {"failed": failed, "errors": sorted(errors)}
