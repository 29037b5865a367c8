"""A worker for tests/test_collectives.py: lesson 01's who_serves_the_store, with every rank kept
in the group until all have looked for the store's server. Under torch's convention rank 0 serves
the store; a rank 0 that had looked first and left would close it, and a slower rank would then
find nobody listening (store_pid None). Ranks import this module by name (see launcher_workers.py).
"""

import torch.distributed as dist

from ddp_lib.demos import store_server


def who_serves_the_store_then_waits(rank: int, world_size: int) -> dict:
    """store_server.who_serves_the_store(rank, world_size), each rank waiting at a barrier after its
    look, inside the group, so the store's server is still there when the last rank looks."""
    look = store_server.port_holder

    def look_then_wait(port: int) -> str | None:
        holder = look(port)
        dist.barrier()
        return holder

    store_server.port_holder = look_then_wait
    return store_server.who_serves_the_store(rank, world_size)
