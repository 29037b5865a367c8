"""A stale key in a shared store (lesson 06): why restarted ranks can fail to connect when a
torchrun job keeps one ranks' store for every attempt.

Two threads play the two ranks of attempt 0. Each builds a gloo group on the store, under the keys
``init_process_group`` uses, then the group is deleted, as when the ranks die. A new rank 0, of
attempt 1, then builds its group on the same store, and on a fresh one for comparison.

    python -m ddp_lib.demos.stale_store
"""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import torch.distributed as dist

WORLD_SIZE = 2


def group_keys(store: dist.Store) -> dist.Store:
    """The store as the default group's gloo backend sees it: ``init_process_group`` prefixes the
    keys with ``default_pg``, the group's name (``0``) and the device type (``cpu``), never with an
    attempt number."""
    return dist.PrefixStore("cpu/", dist.PrefixStore("0/", dist.PrefixStore("default_pg", store)))


def build_group(store: dist.Store, rank: int, timeout_s: float):
    """Rank ``rank``'s gloo group on ``store``, or the exception that building it raised."""
    try:
        return dist.ProcessGroupGloo(group_keys(store), rank, WORLD_SIZE, timedelta(seconds=timeout_s))
    except RuntimeError as e:
        return e


def attempt_0(store: dist.Store) -> None:
    """Both ranks build their group, which writes each rank's address to the store; then they end."""
    groups = [None] * WORLD_SIZE

    def rank_thread(rank):  # each rank has its own connection to the store, as a process would
        client = dist.TCPStore("127.0.0.1", store.port, is_master=False)
        groups[rank] = build_group(client, rank, timeout_s=10)

    threads = [threading.Thread(target=rank_thread, args=(rank,)) for rank in range(WORLD_SIZE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not any(isinstance(group, Exception) for group in groups), groups
    del groups[:]  # the ranks die: their groups close their ports, and their keys stay


def short_error(error: Exception) -> str:
    """The first line of ``error`` without its C++ file paths, and cut before the port or key list:
    ``Gloo connectFullMesh failed with timed out connecting: SO_ERROR: Connection refused``."""
    line = re.sub(r"\[/[^\]]*\] ", "", str(error).splitlines()[0])
    return re.split(r", remote=|, keys:| \[none\]", line)[0]


def rank_0_of_attempt_1(store: dist.Store, timeout_s: float) -> tuple[float, str]:
    """Seconds until a new rank 0 gave up on its group on ``store``, while rank 1 of attempt 1 has
    not started yet, and its error, shortened (``short_error``)."""
    start = time.monotonic()
    result = build_group(store, 0, timeout_s)
    seconds = time.monotonic() - start
    assert isinstance(result, Exception), "rank 0 built a group without rank 1"
    return seconds, short_error(result)


def main() -> None:
    shared = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    attempt_0(shared)
    print(f"keys attempt 0 left in the shared store: {len(shared.list_keys())}, one per rank")
    # In each pair, gloo compares the two addresses and one side dials; which one is decided in gloo's own
    # source, not shipped with torch. If rank 0 dials, rank 1's old port refuses at once ("Connection
    # refused"); if it waits to be dialled, it fails after gloo's connect timeout ("Connect timeout").
    # Either way it got past the store: it read an address, which a fresh store does not have.
    seconds, error = rank_0_of_attempt_1(shared, timeout_s=0.5)
    print(f"attempt 1, same store: rank 0 read rank 1's old address, then failed after {seconds:.2f} s: {error}")
    fresh = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    seconds, error = rank_0_of_attempt_1(fresh, timeout_s=0.5)
    print(f"attempt 1, fresh store: rank 0 waited for rank 1 until its 0.5-s timeout: {seconds >= 0.5} ({error})")


if __name__ == "__main__":
    main()
