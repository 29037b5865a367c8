"""A ring all-reduce built from point-to-point calls: reduce-scatter, then all-gather.

    bytes_sent = ring_all_reduce(tensor)    # tensor now holds the sum over ranks, like dist.all_reduce

Each rank only ever talks to its two neighbours, and sends about 2 (N-1)/N times the tensor's
size whatever the number of ranks N: that is why rings (in gloo, nccl, ...) scale.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.shared import start_tensor
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group
    from shared import start_tensor


def ring_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> int:
    """Sum ``tensor`` over the ranks of ``group`` in place, like ``dist.all_reduce``; return the
    number of bytes this rank sent."""
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if world_size == 1:
        return 0
    right, left = (rank + 1) % world_size, (rank - 1) % world_size  # ranks in ``group``: group_dst=, group_src=
    flat = tensor.view(-1)  # chunks are views, so results land in ``tensor`` itself
    # tensor_split, unlike chunk, always gives world_size pieces: sizes differ by at most one
    # element, and some are empty when the tensor has fewer elements than there are ranks.
    chunks = list(torch.tensor_split(flat, world_size))
    # One receive buffer for the whole call (chunk 0 is the largest), reused by every step.
    buffer = torch.empty_like(chunks[0])
    bytes_sent = 0

    def exchange(send_index: int, recv_into: torch.Tensor) -> None:
        # Every rank sends and receives at once. Blocking sends would deadlock (a send waits for the
        # matching recv), so both are posted together in one batch, as NCCL needs, then awaited.
        nonlocal bytes_sent
        outgoing = chunks[send_index]
        ops = []
        if outgoing.numel():
            ops.append(dist.P2POp(dist.isend, outgoing, group=group, group_peer=right))
        if recv_into.numel():
            ops.append(dist.P2POp(dist.irecv, recv_into, group=group, group_peer=left))
        for request in dist.batch_isend_irecv(ops) if ops else []:
            request.wait()
        bytes_sent += outgoing.numel() * outgoing.element_size()

    # Reduce-scatter: after N-1 steps rank r holds the full sum of chunk (r + 1) % N.
    for step in range(world_size - 1):
        send_index = (rank - step) % world_size
        recv_index = (rank - step - 1) % world_size
        incoming = buffer[:chunks[recv_index].numel()]
        exchange(send_index, incoming)
        chunks[recv_index].add_(incoming)

    # All-gather: pass each finished chunk once around the ring, overwriting stale partial sums.
    for step in range(world_size - 1):
        send_index = (rank + 1 - step) % world_size
        recv_index = (rank - step) % world_size
        exchange(send_index, chunks[recv_index])
    return bytes_sent


def ring_bytes_expected(numel: int, world_size: int, element_size: int = 4) -> float:
    """The textbook figure: each rank sends 2 (N-1)/N times the tensor's size in bytes."""
    return 2 * (world_size - 1) / world_size * numel * element_size


def bytes_written() -> int | None:
    """The bytes this process has written so far, sockets included: ``wchar`` of Linux's
    /proc/self/io. None where that file does not exist (macOS, Windows)."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def gloo_bytes_written(collective: str = "all_reduce", numel: int = 2**18) -> float | None:
    """Run ``dist.all_reduce`` or ``dist.reduce_scatter`` on ``numel`` float32 ones (1 MiB by
    default) and return the bytes this process wrote meanwhile, in sizes of that input, to two
    decimals. On gloo these are its socket sends. None off gloo (nccl's GPU traffic is not written
    by the process) or without /proc/self/io."""
    if dist.get_backend() != "gloo":
        return None
    tensor = torch.ones(numel)
    pieces = list(tensor.chunk(dist.get_world_size()))  # reduce_scatter: piece j is summed into rank j
    dist.barrier()  # no other rank's traffic is on its way when the count starts
    before = bytes_written()
    if collective == "all_reduce":
        dist.all_reduce(tensor)
    else:
        dist.reduce_scatter(torch.empty_like(pieces[dist.get_rank()]), pieces)
    after = bytes_written()
    dist.barrier()
    if before is None or after is None:
        return None
    return round((after - before) / (numel * tensor.element_size()), 2)


def ring_check(rank: int | None = None, world_size: int | None = None, numel: int = 10, seed: int = 0) -> dict:
    """Run ring_all_reduce and dist.all_reduce on the same random tensor; return whether they
    agree, the largest difference and the bytes this rank sent. ``gloo_written``: the bytes
    dist.all_reduce of 1 MiB wrote on this rank, in tensor sizes; ``gloo_reduce_scatter_written``:
    the same for dist.reduce_scatter (gloo_bytes_written).

    Args:
        numel: number of elements in the tensor.
        seed: base seed; rank r uses seed + r.
    """
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        generator = torch.Generator().manual_seed(seed + rank)
        mine = torch.randn(numel, generator=generator).to(device)
        ours, reference = mine.clone(), mine.clone()
        bytes_sent = ring_all_reduce(ours)
        dist.all_reduce(reference)
        # The ring adds in another order than gloo/nccl, so the last bits of a float may differ.
        diff = (ours - reference).abs().max().item() if numel else 0.0
        return {"rank": rank, "numel": numel, "equal": bool(torch.allclose(ours, reference, atol=1e-5)),
                "max_abs_diff": float(f"{diff:.1e}"), "bytes_sent": bytes_sent,
                "bytes_expected": round(ring_bytes_expected(numel, world_size, mine.element_size()), 1),
                "gloo_written": gloo_bytes_written("all_reduce"),
                "gloo_reduce_scatter_written": gloo_bytes_written("reduce_scatter")}


def ring_steps(rank: int | None = None, world_size: int | None = None) -> dict:
    """A ring all-reduce of lesson 01's starting tensors (one element per rank), recording this
    rank's tensor after every step, for the step-by-step picture."""
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        tensor = start_tensor(rank, world_size, device)
        history = [tensor.tolist()]
        chunks = list(torch.tensor_split(tensor, world_size))
        right, left = (rank + 1) % world_size, (rank - 1) % world_size
        for phase in ("reduce-scatter", "all-gather"):
            for step in range(world_size - 1):
                # The same indices as ring_all_reduce, one step at a time.
                offset = 0 if phase == "reduce-scatter" else 1
                send_index = (rank + offset - step) % world_size
                recv_index = (rank + offset - step - 1) % world_size
                incoming = torch.empty_like(chunks[recv_index])
                ops = [dist.P2POp(dist.isend, chunks[send_index], right), dist.P2POp(dist.irecv, incoming, left)]
                for request in dist.batch_isend_irecv(ops):
                    request.wait()
                if phase == "reduce-scatter":
                    chunks[recv_index].add_(incoming)
                else:
                    chunks[recv_index].copy_(incoming)
                history.append(tensor.tolist())
        return {"rank": rank, "history": history}
