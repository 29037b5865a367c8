"""Lesson 01's point-to-point workers: send/recv, isend/irecv, and the deadlock of two blocking sends.

Tensors start as in ddp_lib.workers.collectives: rank r holds [10 r + 1, ..., 10 r + N].
"""

from __future__ import annotations

import re
from datetime import timedelta

import torch
import torch.distributed as dist

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.shared import start_tensor
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group
    from shared import start_tensor

SWAP_ORDERS = ("both_send_first", "by_parity", "isend")


def send_recv(rank: int | None = None, world_size: int | None = None) -> dict:
    """Rank 0 sends its tensor to rank 1 with blocking calls; the other ranks do nothing."""
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        mine = start_tensor(rank, world_size, device)
        before = mine.tolist()
        if rank == 0:
            dist.send(mine, dst=1)  # on gloo over TCP: returns once rank 1 is receiving
        elif rank == 1:
            dist.recv(mine, src=0)  # overwrites mine in place
        dist.barrier()  # leave together: a slower rank may still be in init, reading the store rank 0 serves
        return {"name": "send/recv (rank 0 -> rank 1)", "rank": rank, "before": before,
                "after": mine.tolist(), "defined": True}


def pass_right(rank: int | None = None, world_size: int | None = None) -> dict:
    """Every rank sends its tensor to the next rank around the ring with isend, and receives
    from the previous one with irecv: all transfers are in flight at once."""
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        mine = start_tensor(rank, world_size, device)
        received = torch.empty_like(mine)
        requests = [dist.isend(mine, dst=(rank + 1) % world_size),
                    dist.irecv(received, src=(rank - 1) % world_size)]
        # isend/irecv return at once; the tensors must not be touched until wait() returns.
        for request in requests:
            request.wait()
        return {"name": "isend/irecv (pass right)", "rank": rank, "before": mine.tolist(),
                "after": received.tolist(), "defined": True}


def swap(rank: int | None = None, world_size: int | None = None, numel: int = 1,
         order: str = "both_send_first", timeout_s: float = 60.0) -> dict:
    """Two ranks swap a tensor of ``numel`` floats. ``order``: "both_send_first" (blocking send,
    then recv, on both: deadlocks on gloo), "by_parity" (rank 0 sends first, rank 1 receives
    first) or "isend". Returns whether it completed, and the error if not."""
    if order not in SWAP_ORDERS:
        raise ValueError(f"unknown order {order!r}; accepted: {', '.join(SWAP_ORDERS)}")
    # A short process-group timeout turns a deadlock into an error within seconds.
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if world_size != 2:
            raise ValueError(f"swap needs exactly 2 ranks, got world_size {world_size}")
        peer = 1 - rank
        mine = torch.full((numel,), float(rank), device=device)
        received = torch.empty_like(mine)
        try:
            if order == "both_send_first" or (order == "by_parity" and rank == 0):
                dist.send(mine, dst=peer)
                dist.recv(received, src=peer)
            elif order == "by_parity":
                dist.recv(received, src=peer)
                dist.send(mine, dst=peer)
            else:
                request = dist.isend(mine, dst=peer)
                dist.recv(received, src=peer)
                request.wait()
        except RuntimeError as exc:
            return {"rank": rank, "numel": numel, "completed": False, "error": gloo_message(str(exc))}
        return {"rank": rank, "numel": numel, "completed": bool((received == peer).all()), "error": ""}


# ---- helpers


def gloo_message(text: str) -> str:
    """gloo's first error sentence without its source path and peer address (they vary by machine)."""
    line = (text.strip().splitlines() or [""])[0]
    line = re.sub(r"^\[[^\]]*\]\s*", "", line)  # "[/path/gloo/.../unbound_buffer.cc:129] "
    line = re.sub(r"\s*\[?\d+\.\d+\.\d+\.\d+\]?:\d+", "", line)
    return line.split(". ")[0]
