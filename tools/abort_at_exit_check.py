"""Count the rare abort at exit of lesson 02's DDP script, without and with ``leave()``.

Lesson 00 prints, from
``ddp_lib/demos/recorded/abort_at_exit.json``, how often a rank of
``my_work/ddp_basic.py`` (written by the lesson) ends with SIGABRT after all its work, and that
``leave()`` (``os._exit`` after the worker) avoids it. This script reruns such a series on this
machine: it alternates the script as written with the same worker ended by ``leave()``, and
counts, for each, the runs that printed every line and then aborted.

    PYTHONPATH=. .venv/bin/python tools/abort_at_exit_check.py --runs 20
    PYTHONPATH=. .venv/bin/python tools/abort_at_exit_check.py --runs 150   # a long series (an hour or more)
    PYTHONPATH=. .venv/bin/python tools/abort_at_exit_check.py --runs 150 --record NAME   # kept for the lesson

Run the lesson first, so that ``notebooks/my_work/ddp_basic.py`` exists. An abort is rare
(a few in a hundred on a busy 2-core machine), so a short series often counts none.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "notebooks" / "my_work" / "ddp_basic.py"
LAST_LINE = "parameter checksum on each after one step"

WITH_LEAVE = '''import os
import sys

sys.path.insert(0, {folder!r})
import torch.multiprocessing as mp
from ddp_basic import demo_basic, free_port


def leave():
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_rank(rank, world_size):
    demo_basic(rank, world_size)
    leave()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(free_port())
    mp.spawn(run_rank, args=(2,), nprocs=2, join=True)
'''


def outcome(run: subprocess.CompletedProcess) -> str:
    """"ok", "abort" (every line printed, then a rank ended by SIGABRT) or "failed"."""
    if run.returncode == 0:
        return "ok"
    if LAST_LINE in run.stdout and "SIGABRT" in run.stdout + run.stderr:
        return "abort"
    return "failed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each kind (default 20)")
    parser.add_argument("--record", metavar="NAME",
                        help="append this series, named NAME, to ddp_lib/demos/recorded/abort_at_exit.json")
    args = parser.parse_args()
    if not SCRIPT.exists():
        sys.exit(f"{SCRIPT} is missing: run notebooks/02_spawn.ipynb first")
    with tempfile.TemporaryDirectory() as folder:
        wrapper = Path(folder, "with_leave.py")
        wrapper.write_text(WITH_LEAVE.format(folder=str(SCRIPT.parent)))
        kinds = {"without leave()": [sys.executable, str(SCRIPT), "2"],
                 "with leave()": [sys.executable, str(wrapper)]}
        counts = {kind: {"ok": 0, "abort": 0, "failed": 0} for kind in kinds}
        for i in range(args.runs):
            for kind, command in kinds.items():  # alternating, so both meet the same load
                result = outcome(subprocess.run(command, capture_output=True, text=True, timeout=600))
                counts[kind][result] += 1
                print(f"run {i + 1}, {kind}: {result}", flush=True)
    print(f"\ntorch {__import__('torch').__version__}, Python {sys.version.split()[0]}")
    for kind, count in counts.items():
        print(f"{kind:16} {count['abort']} of {args.runs} aborted at exit, {count['failed']} failed otherwise")
    if args.record:
        from ddp_lib.demos.spawning import ABORT_SERIES

        kept = json.loads(ABORT_SERIES.read_text())
        entry = {"series": args.record, "runs": args.runs}  # launched of each kind
        for kind, count in counts.items():  # [aborted, runs counted]: runs minus these failed otherwise
            entry[kind] = [count["abort"], count["abort"] + count["ok"]]
        entry["torch"] = __import__("torch").__version__
        entry["python"] = ".".join(sys.version.split()[0].split(".")[:2])
        kept["series"].append(entry)
        ABORT_SERIES.write_text(json.dumps(kept, indent=1) + "\n")


if __name__ == "__main__":
    main()
