"""A DDP step against a local step of the same model (1 and 2 ranks), and lesson 04's three
from-scratch DDPs against torch's DDP (2 ranks): every way stepped in turn in one run. Each
rank gets one thread, so a rank computes alike on 1 and 2 ranks, and a busy machine's cores are
not fought over by a rank's own threads.

    python -m ddp_lib bench ddp [--quick] [--repeats N] [--json]
"""

from __future__ import annotations

from ddp_lib.bench.ranks import DDP_BATCH, DDP_WIDTHS, ddp_steps
from ddp_lib.bench.report import run_main
from ddp_lib.launch import spawn

SCRATCH = ["after_backward", "per_parameter_hooks", "buckets"]
COLUMNS = [("world_size", "ranks", "d"), ("way", "way", "s"), ("step_ms", "step (ms)", ".2f"),
           ("baseline", "against", "s"), ("ratio", "ratio", ".2f"), ("allreduces", "all-reduces/step", "d")]


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    """{"rows": DDP vs local on 1 and 2 ranks, then each scratch way vs torch on 2 ranks}."""
    repeats = repeats or (5 if quick else 30)
    rows = []
    for world_size in (1, 2):
        ways = ["local", "torch"] + (SCRATCH if world_size == 2 else [])
        result = spawn(ddp_steps, world_size, args=(ways, repeats), show_output=False,
                       env={"OMP_NUM_THREADS": "1"})[0]
        step = result["step_s"]
        rows.append({"world_size": world_size, "way": "local", "step_ms": round(step["local"] * 1e3, 3),
                     "baseline": None, "ratio": None, "allreduces": None})
        rows.append({"world_size": world_size, "way": "torch", "step_ms": round(step["torch"] * 1e3, 3),
                     "baseline": "local", "ratio": round(step["torch"] / step["local"], 3),
                     "allreduces": result["allreduces"]["torch"]})
        for way in ways[2:]:
            rows.append({"world_size": world_size, "way": way, "step_ms": round(step[way] * 1e3, 3),
                         "baseline": "torch", "ratio": round(step[way] / step["torch"], 3),
                         "allreduces": result["allreduces"][way]})
    return {"rows": rows, "model_widths": list(DDP_WIDTHS), "batch_per_rank": DDP_BATCH, "repeats": repeats}


def _notes(result: dict) -> str:
    by = {(r["world_size"], r["way"]): r for r in result["rows"]}
    lines = [f"MLP widths {result['model_widths']}, batch {result['batch_per_rank']} per rank, "
             f"one thread per rank, median of {result['repeats']} steps per way after 2 warm-up rounds"]
    one = by[(1, "torch")]["ratio"]
    verdict = "met" if one <= 1.10 else "missed"
    lines.append(f"goal DDP on 1 rank within 1.10x of the local step: {one:.2f}x ({verdict})")
    bucketed = by[(2, "buckets")]["ratio"]
    lines.append(f"goal bucketed from-scratch DDP within 1.2x of torch DDP (2 ranks): {bucketed:.2f}x "
                 f"({'met' if bucketed <= 1.2 else 'missed'})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return run_main(argv, "ddp", __doc__, measure, COLUMNS, _notes)
