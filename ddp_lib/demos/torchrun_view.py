"""Lesson 02: ``launcher_view`` under torchrun. Run ``torchrun --nproc-per-node 2 -m
ddp_lib.demos.torchrun_view``: each rank prints what it finds as one JSON line. The ranks do not
import torch, so the job costs one import of torch, in torchrun's own process."""

from __future__ import annotations

import json
import os

from ddp_lib.demos.launcher_env import launcher_env


def main() -> None:
    """Print this rank's launcher variables as ``{"rank": r, "view": {"env": {...}}}``, its address and
    port as "set"."""
    rank = int(os.environ["RANK"])
    view = {"env": launcher_env()}
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # they change from run to run
        if view["env"][name] is not None:
            view["env"][name] = "set"
    print(json.dumps({"rank": rank, "view": view}), flush=True)


def views_from(printed: str) -> list[dict]:
    """The views that ``main`` printed, one per rank, in rank order."""
    records = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    return [record["view"] for record in sorted(records, key=lambda record: record["rank"])]


if __name__ == "__main__":
    main()
