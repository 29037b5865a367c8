"""The smallest multi-host check: every rank joins the group, and an ``all_gather`` brings each
rank's host name to every rank. Light enough to show a mistake quickly (no DDP, no data).

    torchrun ... -m ddp_lib.torchrun ddp_lib.cluster.probe:hello
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import timedelta

import torch.distributed as dist

from ddp_lib.launch._record import write_error
from ddp_lib.process_group import process_group

# A peer that cannot be reached fails the first collective within this, not gloo's 30 minutes.
TIMEOUT = timedelta(seconds=10)


def listening_unavailable() -> str | None:
    """Why ``agent_listening_and_store`` cannot read its agent's sockets here, or None where it can."""
    return None if sys.platform.startswith("linux") and shutil.which("ss") else "it needs Linux and ss (iproute2)"


def hello(rank: int, world_size: int) -> dict:
    """Join the group; return this rank's host and the host of every rank, gathered over gloo."""
    with process_group(rank, world_size, timeout=TIMEOUT):
        hosts = [None] * world_size
        dist.all_gather_object(hosts, socket.gethostname())
        return {"rank": rank, "host": socket.gethostname(), "hosts": hosts}


# How long, in group timeouts from its start, a rank of hello_lingering that failed stays alive.
LINGER = 7


def hello_lingering(rank: int, world_size: int) -> dict:
    """:func:`hello`, but a rank that fails writes its error at once, then stays alive until
    ``LINGER`` group timeouts after it began. Its torchrun, and the ranks' store node 0's torchrun
    hosts, then outlive gloo's five-fold wait for a first connection on the other rank."""
    began = time.monotonic()
    try:
        return hello(rank, world_size)
    except Exception as exc:
        write_error(exc)  # the error's time is when it happened, not when the rank exits
        print(f"[rank{rank}]: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        time.sleep(max(0.0, LINGER * TIMEOUT.total_seconds() - (time.monotonic() - began)))
        os._exit(1)  # already reported: raising again would write the error file a second time


def _agent_sockets() -> list[tuple[str, int]]:
    """The (address, port) of each socket on which this rank's parent, the torchrun agent, accepts
    connections, from ``ss -ltnp`` (Linux); sorted. Address ``*`` means every interface."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    agent = f"pid={os.getppid()},"
    found = (line.split()[3].rsplit(":", 1) for line in out.splitlines() if agent in line)
    return sorted((address, int(port)) for address, port in found)


def agent_listening(rank: int, world_size: int) -> list[str]:
    """The local addresses (ports left out) on which this rank's parent, the torchrun agent,
    accepts connections, from ``ss -ltnp`` (Linux). ``*`` means every interface."""
    return sorted(address for address, _ in _agent_sockets())


def agent_listening_and_store(rank: int, world_size: int) -> dict:
    """:func:`agent_listening`, the ports of those sockets, the address and port of the ranks' store
    that torchrun gave this rank (``MASTER_ADDR``, ``MASTER_PORT``), and this rank's host name."""
    sockets = _agent_sockets()
    return {"listening": sorted(address for address, _ in sockets), "ports": sorted(port for _, port in sockets),
            "MASTER_ADDR": os.environ["MASTER_ADDR"], "MASTER_PORT": int(os.environ["MASTER_PORT"]),
            "host": socket.gethostname()}


def fail_on_rank1(rank: int, world_size: int) -> None:
    """Rank 1 raises once every rank has joined the group; the others find it gone in a barrier
    2 s later. On two nodes, each node's torchrun then prints a failure summary, node1's first."""
    with process_group(rank, world_size, timeout=TIMEOUT):
        dist.barrier()  # every rank has joined
        if rank == 1:
            raise ValueError("rank 1 was told to fail")
        time.sleep(2)
        dist.barrier()
