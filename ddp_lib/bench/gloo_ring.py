"""Which messages gloo's ring all-reduce sends, for a message small enough to need only the
minimum of 2N segments (far below gloo's segment limit). It follows ``ring()`` in gloo's
``gloo/allreduce.cc``: each of the two phases, reduce-scatter then all-gather, runs
``numSegments - numSegmentsPerRank`` = 2(N-1) iterations; in each, every rank sends one segment
to rank - 1, and skips the send when that segment lies past the end of the data."""

from __future__ import annotations


def segment_bytes(nbytes: int, world_size: int, element_bytes: int = 4) -> int:
    """gloo's segment size: the bytes over 2N segments, rounded up to whole elements."""
    per_segment = -(-nbytes // (2 * world_size))  # ceiling division
    return -(-per_segment // element_bytes) * element_bytes


def ring_sends(nbytes: int, world_size: int, element_bytes: int = 4) -> list[dict]:
    """One dict per message that carries data: phase ("reduce-scatter" or "all-gather"),
    iteration, sending rank, receiving rank (rank - 1) and the segment's index."""
    segments, per_rank = 2 * world_size, 2
    size = segment_bytes(nbytes, world_size, element_bytes)
    # Segment index sent by `rank` at iteration i: (rank + 1) * 2 + i in reduce-scatter, rank * 2 + i after.
    first = {"reduce-scatter": 1, "all-gather": 0}
    sends = []
    for phase, shift in first.items():
        for i in range(segments - per_rank):
            for rank in range(world_size):
                segment = ((rank + shift) * per_rank + i) % segments
                if nbytes - segment * size > 0:  # gloo: sendLength > 0
                    sends.append({"phase": phase, "iteration": i, "rank": rank,
                                  "to": (rank - 1) % world_size, "segment": segment})
    return sends
