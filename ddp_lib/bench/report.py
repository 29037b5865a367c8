"""What the benchmarks share: the bus-bandwidth formula, the command line and the output.

Every benchmark module has ``measure(quick=False, repeats=None) -> dict`` (its table in "rows",
anything else beside it) and a ``COLUMNS`` list of (key, heading, format); ``main(argv)`` prints
the rows as a table (and notes), or the whole dict as JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable

# What a kept run records about the machine it ran on (``machine()``), so that a reader can tell
# which torch and which CPU gave its numbers.
MACHINE_KEYS = ("torch", "cpu_count", "cpu_model")


def bus_factor(world_size: int) -> float:
    """nccl-tests' factor for all-reduce: each rank sends and receives 2 (N-1)/N of the data."""
    return 2 * (world_size - 1) / world_size


def algbw_gbs(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes): the message size over the time of one all-reduce."""
    return nbytes / seconds / 1e9


def busbw_gbs(nbytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth in GB/s: algbw times 2 (N-1)/N, comparable with a link's bandwidth."""
    return algbw_gbs(nbytes, seconds) * bus_factor(world_size)


def human_bytes(nbytes: int) -> str:
    """4, 1 KiB, 16 MiB: sizes as the tables print them."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def cpu_model() -> str:
    """The CPU's model name: Linux's ``/proc/cpuinfo``, else ``platform.processor()``, else the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.lower().startswith(("model name", "hardware")) and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:  # no /proc: macOS, Windows
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict:
    """The machine a benchmark runs on, recorded beside its rows: torch's version, the cores, the CPU's model."""
    import torch  # here, not at the top: the command line's argument checks run without torch

    return {"torch": torch.__version__, "cpu_count": os.cpu_count(), "cpu_model": cpu_model()}


def recorded_machine(run: dict) -> str:
    """What a kept run recorded of its machine, one line; "not recorded" for what an older record lacks."""
    said = {key: run.get(key) for key in MACHINE_KEYS}
    return (f"torch {said['torch'] or 'not recorded'}, "
            f"{str(said['cpu_count']) + ' cores' if said['cpu_count'] else 'cores not recorded'}, "
            f"CPU {said['cpu_model'] or 'not recorded'}")


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Rows as a text table: columns are (key, heading, format spec), widths fitted to contents."""
    cells = [[format(row[key], spec) if row.get(key) is not None else "-" for key, _, spec in columns] for row in rows]
    widths = [max(len(heading), *(len(c[i]) for c in cells)) if cells else len(heading)
              for i, (_, heading, _) in enumerate(columns)]
    lines = ["  ".join(h.rjust(w) for (_, h, _), w in zip(columns, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(lines)


def run_main(argv: list[str], prog: str, doc: str, measure: Callable[..., dict],
             columns: list[tuple[str, str, str]], notes: Callable[[dict], str] | None = None) -> int:
    """Parse --quick/--repeats/--json, measure, then print a table (and notes) or JSON."""
    from ddp_lib.cli import OneLineParser
    from ddp_lib.launch._checks import whole_number

    def at_least_one(text: str) -> int:
        number = whole_number(text)
        if number is None or number < 1:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
        return number

    parser = OneLineParser(prog=f"python -m ddp_lib bench {prog}", description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats: seconds, not minutes")
    parser.add_argument("--repeats", type=at_least_one, default=None, help="timed repeats per figure (after warm-up)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    opts = parser.parse_args(argv)
    result = measure(quick=opts.quick, repeats=opts.repeats)
    if opts.json:
        print(json.dumps(result))
        return 0
    print(format_table(result["rows"], columns))
    if notes:
        print(notes(result))
    return 0
