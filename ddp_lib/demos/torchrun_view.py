"""Lesson 02: ``launcher_view`` under torchrun. Run ``torchrun --nproc-per-node 2 -m
ddp_lib.demos.torchrun_view``: each rank prints what it finds as one JSON line, with which process
listens on ``MASTER_PORT``: this rank, or its parent, torchrun's agent. The ranks do not import
torch, so the job costs one import of torch, in torchrun's own process."""

from __future__ import annotations

import json
import os
import sys

from ddp_lib.demos.launcher_env import launcher_env
from ddp_lib.ports import listens_on


def main() -> None:
    """Print this rank's launcher variables as ``{"rank": r, "view": {"env": {...}, "store": {...}}}``,
    its address and port as "set", and whether this rank or its parent listens on ``MASTER_PORT``."""
    rank = int(os.environ["RANK"])
    port = int(os.environ["MASTER_PORT"])
    view = {"env": launcher_env(),
            "store": {"agent": listens_on(os.getppid(), port), "rank": listens_on(os.getpid(), port)}}
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # they change from run to run
        if view["env"][name] is not None:
            view["env"][name] = "set"
    # One write of the whole line: the ranks share torchrun's stdout, and a print's text and its newline
    # can go out as two writes (unbuffered output), between which the other rank's line lands.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps({"rank": rank, "view": view}) + "\n").encode())


def views_from(printed: str) -> list[dict]:
    """The views that ``main`` printed, one per rank, in rank order."""
    records = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    return [record["view"] for record in sorted(records, key=lambda record: record["rank"])]


if __name__ == "__main__":
    main()
