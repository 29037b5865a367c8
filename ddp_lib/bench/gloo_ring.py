"""Which messages gloo's ring all-reduce sends. It follows ``ring()`` in gloo's ``gloo/allreduce.cc``:
the data is cut into ``numSegments`` = the larger of 2N and the bytes over the segment limit (1 MiB,
``kMaxSegmentSize`` in ``gloo/allreduce.h``), rounded up to a multiple of N; each of the two phases,
reduce-scatter then all-gather, runs ``numSegments - numSegmentsPerRank`` iterations (2(N-1) for
small messages); in each, every rank sends one segment to rank - 1, and skips the send when that
segment lies past the end of the data."""

from __future__ import annotations

MAX_SEGMENT_BYTES = 1 << 20  # gloo's kMaxSegmentSize


def segment_count(nbytes: int, world_size: int, element_bytes: int = 4) -> int:
    """gloo's numSegments: at least 2N, at least the bytes over the segment limit, a multiple of N."""
    limit = element_bytes * max(1, MAX_SEGMENT_BYTES // element_bytes)
    wanted = max(-(-nbytes // limit), 2 * world_size)
    return -(-wanted // world_size) * world_size


def segment_bytes(nbytes: int, world_size: int, element_bytes: int = 4) -> int:
    """gloo's segment size: the bytes over segment_count() segments, rounded up to whole elements."""
    per_segment = -(-nbytes // segment_count(nbytes, world_size, element_bytes))  # ceiling division
    return -(-per_segment // element_bytes) * element_bytes


def ring_sends(nbytes: int, world_size: int, element_bytes: int = 4) -> list[dict]:
    """One dict per message that carries data: phase ("reduce-scatter" or "all-gather"),
    iteration, sending rank, receiving rank (rank - 1) and the segment's index."""
    segments = segment_count(nbytes, world_size, element_bytes)
    per_rank = segments // world_size
    size = segment_bytes(nbytes, world_size, element_bytes)
    # Segment sent by `rank` at iteration i: (rank + 1) * per_rank + i in reduce-scatter, rank * per_rank + i after.
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
