"""A lost host (lesson 07): a rank that stops answering without closing its connections, as when
its machine loses power or its network. SIGSTOP freezes the process: its sockets stay open, so no
survivor hears that it is gone, unlike a killed process whose kernel closes them.

Each rank writes what happened to it in ``record_dir`` (read with
``ddp_lib.workers.faulty_ranks.read_records``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta


def freeze_in_collective(rank: int, world_size: int, record_dir: str, bad_rank: int = 1,
                         timeout_s: float = 2.0) -> None:
    """Every rank all-reduces in a loop; ``bad_rank`` freezes in the middle of it (SIGSTOP). A survivor
    writes when it entered the collective that raised, when it raised, and how. It then ends the frozen
    rank (SIGKILL), as the scheduler would end a lost node's job, so that the launcher need not wait for it."""
    import torch
    import torch.distributed as dist

    from ddp_lib.process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        data = torch.zeros(1 << 16)
        dist.all_reduce(data)  # every connection is open before the host is lost
        if rank == bad_rank:
            _write(record_dir, rank, {"froze_at": time.monotonic(), "pid": os.getpid()})
            os.kill(os.getpid(), signal.SIGSTOP)
        try:
            while True:
                entered_at = time.monotonic()  # the timeout counts from here, not from the freeze
                dist.all_reduce(data)
        except RuntimeError as exc:
            _write(record_dir, rank, {"entered_at": entered_at, "failed_at": time.monotonic(), "error": str(exc)})
            with open(os.path.join(record_dir, f"rank{bad_rank}.json")) as f:
                os.kill(json.load(f)["pid"], signal.SIGKILL)
            raise


def _write(record_dir: str, rank: int, record: dict) -> None:
    path = os.path.join(record_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)  # whole, for a reader in another process
