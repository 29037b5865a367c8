"""Lesson 10's tables: the bytes each strategy sends in a step and the choice between the strategies,
from ``compare_strategies``' results; and what a large model needs per GPU under each strategy.

Each ``runs`` argument maps a strategy to its results, one per rank, as ``by_strategy`` returns
them; the tables read rank 0's. The lesson's four launches (``strategies_on_2``, ``four_rank_job``,
``checkpoint_job`` and ``loop_job``) are here too: each runs its workers one after the other in one
job with ``in_one_job``, so that each cell reads one line.
"""

import math
import os

import torch

from ddp_lib.demos import fsdp_step_times
from ddp_lib.demos.fsdp_step_times import KEPT_RUNS_NAME
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import in_one_job
from ddp_lib.workers.beyond_ddp import (
    STRATEGIES,
    bytes_sent,
    collectives_asked,
    compare_strategies,
    in_words,
    zero_prediction,
)

W = "ddp_lib.workers.beyond_ddp:"  # in_one_job takes each worker as "module:function"


def by_strategy(ranks: list[dict]) -> dict:
    """[{strategy: result} per rank] -> {strategy: [result per rank]}."""
    return {s: [r[s] for r in ranks] for s in ranks[0]}


def strategies_on_2(strategies: str = ",".join(STRATEGIES), timed_steps: int = 0) -> dict:
    """Run ``compare_strategies`` on 2 ranks for each strategy, one after the other, then time
    ``timed_steps`` steps of each in turn (0: none). Returns {strategy: [result per rank]}."""
    return by_strategy(run_ranks(compare_strategies, 2,
                                 kwargs=dict(strategies=strategies, timed_steps=timed_steps), show_output=False))


def four_rank_job(strategies: str = "ddp,zero1,fsdp") -> tuple[dict, list[dict]]:
    """One 4-rank launch: ``compare_strategies`` for ``strategies``, an HSDP step on a 2x2 mesh and the
    seeding check. Returns ({strategy: [result per rank]}, [{"hsdp": ..., "seeded": ...} per rank])."""
    job = run_ranks(in_one_job, 4, kwargs=dict(calls={
        "strategies": (W + "compare_strategies", dict(strategies=strategies, timed_steps=0)),
        "hsdp": (W + "hsdp_step", {}),
        "seeded": (W + "seeded_by_rank", {}),  # each rank seeded by its rank
    }), show_output=False)
    return by_strategy([r.pop("strategies") for r in job]), job


def checkpoint_job(checkpoint_dir: str) -> list[dict]:
    """One 2-rank launch: ZeRO-1's consolidation; an FSDP2 run of 4 steps saved after step 2, the
    same resumed from that checkpoint, and loaded without training; a full state dict exported.
    Returns {name: result} per rank, names "zero_save", "straight", "resumed", "loaded", "export"."""
    run = dict(steps=4, save_at=2, checkpoint_dir=checkpoint_dir)
    return run_ranks(in_one_job, 2, kwargs=dict(calls={
        "zero_save": ("ddp_lib.demos.zero_consolidate:consolidated_state", {}),
        "straight": (W + "fsdp_checkpoint", run),  # saves after step 2
        "resumed": (W + "fsdp_checkpoint", run | dict(resume=True)),
        "loaded": (W + "fsdp_checkpoint", run | dict(steps=2, resume=True)),  # trains no step
        "export": ("ddp_lib.demos.full_state_export:full_state_export",
                   dict(path=os.path.join(checkpoint_dir, "model.pt"))),  # rank 0's one ordinary file
    }), show_output=False)


def loop_job() -> list[dict]:
    """One 2-rank launch of what a sharded loop adds: ``fsdp_extras`` (clipping, mixed precision,
    activation checkpointing, the optimizer's order), gradient accumulation and the meta device.
    Returns {name: result} per rank, names "extras", "accumulation", "meta"."""
    return run_ranks(in_one_job, 2, kwargs=dict(calls={
        "extras": (W + "fsdp_extras", {}),
        "accumulation": ("ddp_lib.demos.fsdp_accumulation:accumulation_counts", {}),
        "meta": ("ddp_lib.demos.meta_init:meta_init", {}),
    }), show_output=False)


PARTS = ("parameters", "gradients", "optimizer state")
STAGE = {"ddp": 0, "ddp_view": 0, "zero1": 1, "zero1_view": 1, "fsdp": 3, "fsdp_no_reshard": 3}  # ZeRO stage


def counted(r: dict) -> int:
    """Bytes of parameters, gradients and optimizer state a rank holds, from its tensors' sizes."""
    return sum(r["bytes"][part] for part in PARTS)


def formula_gap(runs: dict, world_size: int) -> int:
    """The largest gap, in bytes, between a rank's count and the ZeRO formula, over every strategy and rank."""
    return max(abs(counted(r) - zero_prediction(r["n_params"], world_size, STAGE[s]))
               for s, ranks in runs.items() for r in ranks)


def held(r: dict) -> int:
    """Bytes a rank holds after backward: parameters, gradients, optimizer state, and DDP's bucket
    copy where the gradients lie outside the buckets (the memory bars' height)."""
    layout = r["layout"]
    copy = layout["bucket_bytes"] if layout and not layout["gradients_inside_buckets"] else 0
    return counted(r) + copy


def carried(payloads: list[tuple[str, int]]) -> str:
    """The collectives of one step in words: how many of each kind, and the MB of their full tensors."""
    kinds: dict[str, tuple[int, int]] = {}
    for kind, size in payloads:
        count, total = kinds.get(kind, (0, 0))
        kinds[kind] = (count + 1, total + size)
    return ", ".join(f"{count} {kind} ({total / 1e6:.2f} MB)" for kind, (count, total) in kinds.items())


def paper_bytes(stage: int, param_bytes: int, world_size: int) -> float:
    """Bytes a rank sends per step under ZeRO as the paper has it: stages 1 and 2 reduce-scatter the
    gradients and all-gather the updated parameters; stage 3 all-gathers them twice, before forward
    and again in backward."""
    gathers = 2 if stage == 3 else 1
    return bytes_sent([("reduce_scatter", param_bytes)] + [("all_gather", param_bytes)] * gathers, world_size)


def bytes_table(runs2: dict, runs4: dict) -> dict:
    """Print the MB each strategy sends per rank per step, on 2 and 4 ranks, against DDP (a ring's bytes
    for each traced collective's size, in float32); return {world_size: {strategy: bytes sent}}."""
    sent = {n: {s: bytes_sent(runs[s][0]["payloads"], n) for s in runs} for n, runs in ((2, runs2), (4, runs4))}
    print("MB a rank sends per step (ring model, traced sizes)")
    print(f"{'strategy':<26}{'2 ranks':>8}{'x DDP':>7}{'4 ranks':>9}{'x DDP':>7}  collectives (2 ranks)")
    for s in runs2:
        two = f"{sent[2][s] / 1e6:>8.2f}{sent[2][s] / sent[2]['ddp']:>7.2f}"
        four = f"{sent[4][s] / 1e6:>9.2f}{sent[4][s] / sent[4]['ddp']:>7.2f}" if s in sent[4] else f"{'-':>9}{'-':>7}"
        print(f"{s:<26}{two}{four}  {carried(runs2[s][0]['payloads'])}")
    return sent


def as_gloo_ran(payloads: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """A traced step's collectives as gloo runs them: each reduce-scatter as an all-reduce of the same size."""
    return [("all_reduce" if kind == "reduce_scatter" else kind, size) for kind, size in payloads]


def choice_table(runs2: dict, step_ms: dict | None = None) -> dict:
    """Print, for each strategy on rank 0 on 2 ranks, the MB held, Adam's state against DDP's, the
    bytes sent against DDP's, the collectives a step (live: from ``runs2``), with ``step_ms``
    ({strategy: ms}, such as ``fsdp_step_times.best(kept, "step_ms")``) the fastest step of the kept
    runs (recorded), and a short reason.
    Returns {strategy: {"held": bytes, "held_gathered": bytes, "sent": x DDP}}."""
    r2 = {s: ranks[0] for s, ranks in runs2.items()}
    state = {s: r["bytes"]["optimizer state"] for s, r in r2.items()}
    advice = {  # one short clause per row; the numbers are in their own columns
        "ddp": "simplest; holds the same on any number of ranks",
        "ddp_view": "DDP without its bucket copy",
        "zero1": "state sharded, but the bucket copy stays",
        "zero1_view": "state sharded, no bucket copy",
        "fsdp": "the least memory, the most collectives",
        "fsdp_no_reshard": "DDP's bytes sent, gathered weights kept",
    }
    sent_ddp = bytes_sent(r2["ddp"]["payloads"], 2)
    gathered = gathered_bytes(r2)
    rows = {}
    columns = ("MB held (2 ranks)", "Adam state ×DDP", "bytes sent ×DDP", "collectives/step")
    if step_ms is not None:
        columns += ("recorded step ms",)
    print(f"{'strategy':<16}" + "".join(f"{c:>{len(c) + 2}}" for c in columns) + "  why")
    for s, why in advice.items():
        rows[s] = {"held": held(r2[s]), "held_gathered": held(r2[s]) + gathered.get(s, 0),
                   "sent": bytes_sent(r2[s]["payloads"], 2) / sent_ddp}
        cells = (f"{rows[s]['held'] / 1e6:.2f}", f"{state[s] / state['ddp']:.2f}", f"{rows[s]['sent']:.2f}",
                 f"{collectives_asked(r2[s])}") + ((f"{step_ms[s]:.1f}",) if step_ms is not None else ())
        print(f"{s:<16}" + "".join(f"{v:>{len(c) + 2}}" for c, v in zip(columns, cells)) + f"  {why}")
    print("rank 0 on 2 ranks; bytes sent in float32, by the ring model on the traced sizes "
          "(nccl's ring algorithm; nccl may pick others)"
          + ("; live: every column but the recorded step, from this run" if step_ms is not None else ""))
    as_gloo = {s: bytes_sent(as_gloo_ran(r2[s]["payloads"]), 2) / sent_ddp for s in ("fsdp", "fsdp_no_reshard")}
    print("bytes sent ×DDP by the ring model, on the collectives gloo ran here: "
          + ", ".join(f"{s} {x:.2f}" for s, x in as_gloo.items()))
    if step_ms is not None:
        print(f"recorded step ms: the fastest step of the kept runs, recorded earlier (file {KEPT_RUNS_NAME})")
    return rows


def gathered_bytes(r2: dict) -> dict:
    """{strategy: bytes of gathered weights held beside the shards}, from rank 0's results on 2 ranks.
    FSDP2 without reshard keeps every gathered weight until backward: counted, as what its forward
    leaves held beyond DDP's. With reshard, estimated as the two largest units gathered at once."""
    kept_weights = r2["fsdp_no_reshard"]["bytes"]["activations"] - r2["ddp"]["bytes"]["activations"]
    units = sorted(size for kind, size in r2["fsdp"]["payloads"] if kind == "all_gather")
    return {"fsdp": sum(units[-2:]), "fsdp_no_reshard": kept_weights}


def sizing(big: float = 7e9, gpus: int = 8, blocks: int = 32) -> list[dict]:
    """GB per GPU for a model of ``big`` parameters trained with Adam on ``gpus`` GPUs, under each
    strategy, before activations. Each row: "name", "stage", "parts" (parameters, gradients, state and
    DDP's bucket copy, bytes per parameter), "after_backward" (bytes), "bwd" and "step" (bytes per
    parameter that backward and Adam's step add for a while; "bwd" is None for the paper's rows) and "at_peak"
    (bytes: after backward plus the larger of the two)."""
    torch_amp = (4, 4, 8)  # bytes per parameter (parameters, gradients, state): autocast keeps float32 parameters
    paper_amp = (2, 2, 12)  # the paper's mixed precision: 16-bit parameters and gradients, float32 master weights
    # FSDP2 wraps each of the equal blocks as one unit: the unit computing, one gathered ahead and one unit's
    # gradients, in bfloat16, and that unit's float32 reduce-scatter buffer (reduce_dtype=torch.float32)
    fsdp_units = (3 * 2 + 4) / blocks
    # without reshard, every block's bfloat16 weights stay gathered from forward to backward (2 bytes per
    # parameter), plus one unit's bfloat16 gradients and its float32 reduce-scatter buffer
    no_reshard_units = 2 + (2 + 4) / blocks
    # (name, ZeRO stage, bytes per parameter, DDP's bucket copy per parameter, what backward adds per parameter:
    #  the bfloat16 copies of the weights that autograd saves from forward to backward, or FSDP2's unsharded units)
    table = [
        ("DDP, autocast", 0, torch_amp, 4, 2),
        ("  with gradient_as_bucket_view", 0, torch_amp, 0, 2),
        ("DDP + ZeroRedundancyOptimizer", 1, torch_amp, 4, 2),
        ("  with gradient_as_bucket_view", 1, torch_amp, 0, 2),
        ("FSDP2, MixedPrecisionPolicy", 3, torch_amp, 0, fsdp_units),
        ("  reshard_after_forward=False", 3, torch_amp, 0, no_reshard_units),
        ("ZeRO-1, the paper", 1, paper_amp, 0, None),
        ("ZeRO-2, the paper", 2, paper_amp, 0, None),
        ("ZeRO-3, the paper", 3, paper_amp, 0, None),
    ]
    rows = []
    for name, stage, (p, g, s), copy, bwd in table:
        shards = (gpus if stage >= 3 else 1, gpus if stage >= 2 else 1, gpus if stage >= 1 else 1)
        parts = (p / shards[0], g / shards[1], s / shards[2], copy)
        after_backward = zero_prediction(big, gpus, stage, (p, g, s)) + copy * big
        assert abs(sum(parts) * big - after_backward) < 1, name  # the parts add up to the formula's total
        # Adam's default foreach step on CUDA makes one float32 temporary per parameter it steps: 4 bytes,
        # sharded from ZeRO-1 on
        step = 4 / (gpus if stage >= 1 else 1)
        at_peak = after_backward + max(bwd or 0, step) * big
        rows.append({"name": name, "stage": stage, "parts": parts, "after_backward": after_backward,
                     "bwd": bwd, "step": step, "at_peak": at_peak})
    return rows


BAR_LABELS = {"ddp": "DDP", "ddp_view": "DDP\nbucket view", "zero1": "ZeRO-1", "fsdp": "FSDP2",
              "fsdp_no_reshard": "FSDP2\nno reshard"}


def memory_bars(runs_by_ranks: dict) -> dict:
    """Rank 0's bars for ``plot_memory_bars``: {"N ranks": {label: {part: bytes}}}, from {N: runs}. The parts
    are the counted ones, DDP's bucket copy (where the gradients lie outside the buckets) and the
    activations one forward leaves held until backward."""
    def bars(r):
        layout = r["layout"]
        copy = layout["bucket_bytes"] if layout and not layout["gradients_inside_buckets"] else 0
        return {**{p: r["bytes"][p] for p in PARTS}, "DDP's bucket copy": copy,
                "activations": r["bytes"]["activations"]}
    return {f"{n} ranks": {BAR_LABELS[s]: bars(runs[s][0]) for s in runs if s in BAR_LABELS}
            for n, runs in runs_by_ranks.items()}


def seven_b_table(big: float = 7e9, gpus: int = 8) -> dict:
    """Print GB per GPU for DDP, ZeRO-1 (both with the bucket view) and FSDP2 with and without
    resharding, from ``sizing``'s rows, and what each leaves of 80 GB for activations (an estimate: the
    root unit, nccl's buffers and fragmentation are left out). Returns {label: row}."""
    sized = sizing(big, gpus)
    names = [r["name"].strip() for r in sized]
    rows = {"DDP, bucket view": sized[names.index("DDP, autocast") + 1],  # its "with gradient_as_bucket_view" row
            "ZeRO-1, bucket view": sized[names.index("DDP + ZeroRedundancyOptimizer") + 1],  # the same
            "FSDP2": sized[names.index("FSDP2, MixedPrecisionPolicy")],
            "FSDP2 no reshard": sized[names.index("reshard_after_forward=False")]}
    print(f"{f'{big / 1e9:g}B on {gpus} GPUs':<20}{'GB after backward':>18}{'+ bwd GB':>9}{'+ step GB':>10}"
          f"{'GB at peak':>11}  GB per GPU, before activations")
    for label, row in rows.items():
        gb = row["at_peak"] / 1e9
        # an estimate: the root unit, nccl's buffers and fragmentation are left out (folded "sizing a real model")
        verdict = f"fits (estimate), {80 - gb:.1f} GB left for activations" if gb < 80 else "does not fit in 80 GB"
        print(f"{label:<20}{row['after_backward'] / 1e9:>18.1f}{row['bwd'] * big / 1e9:>9.1f}"
              f"{row['step'] * big / 1e9:>10.1f}{gb:>11.1f}  {verdict}")
    return rows


def print_hsdp(job4: list[dict]) -> list[dict]:
    """Print where each rank of the 2x2 HSDP step sits and its two groups, from the 4-rank job's
    ``"hsdp"`` results. Returns those results, one per rank."""
    hsdp = [r["hsdp"] for r in job4]
    for r in hsdp:
        print(f"rank {r['rank']} at {r['coordinate']}: replicate group {r['replicate_group']}, "
              f"shard group {r['shard_group']}")
    return hsdp


def _params_held(hsdp: list[dict]) -> list[int]:
    """The parameters each rank of the HSDP step holds, from its local shapes."""
    return [sum(math.prod(shape) for shape in r["local_shapes"]) for r in hsdp]


def hsdp_share(hsdp: list[dict]) -> float:
    """The share of the model's parameters a rank holds on average under HSDP: ranks 0 and 1, one
    shard group, hold the model between them."""
    held_hsdp = _params_held(hsdp)
    return sum(held_hsdp) / len(hsdp) / (held_hsdp[0] + held_hsdp[1])


def print_loop_parts(loop: list[dict], parts: tuple = ("clip", "mixed", "checkpointing", "order")) -> None:
    """Print rank 0's results of ``fsdp_extras`` for the parts named: "clip" (clipping), "mixed" (mixed
    precision), "checkpointing" (activation checkpointing) and "order" (an optimizer created before
    ``fully_shard``). The lesson prints the verdict on the optimizer itself."""
    extras = loop[0]["extras"]
    clip, mixed, ac = extras["clip"], extras["mixed"], extras["checkpointing"]
    more = "\n    "  # each verdict on its own short line, under its part
    if "clip" in parts:
        print(f"clip_grad_norm_: DDP's norm {clip['ddp_norm']}, FSDP2's {clip['fsdp_norm']}, "
              f"returned as a {clip['norm_type']} {clip['norm_placements']}"
              f"{more}clipped gradients equal within 1e-6: {clip['max_grad_diff'] < 1e-6}")
    if "mixed" in parts:
        print(f"MixedPrecisionPolicy: forward computes in {mixed['compute_dtype']}, output {mixed['output_dtype']}"
              f"{more}sharded parameters {mixed['param_dtype']}, sharded gradients {mixed['grad_dtype']}"
              f"{more}against float32: outputs' relative error "
              f"{precision_verdict(mixed['output_rel_err'], 0.01)}"
              f"{more}reduce-scattered gradients' relative error {precision_verdict(mixed['grad_rel_err'], 0.1)}")
        # bfloat16 keeps 8 significant bits: it rounds a number by up to half its eps, relative to the number
        print(f"bfloat16 rounds each number by up to {torch.finfo(torch.bfloat16).eps / 2:.1%}")
    if "checkpointing" in parts:
        print(f"activation checkpointing: the forward keeps {ac['forward_bytes_checkpointed']:,} bytes instead of "
              f"{ac['forward_bytes']:,}{more}gradients equal: {ac['max_grad_diff'] == 0}")
        print(f"each block checkpointed, then sharded: gradients equal DDP's within 1e-6: "
              f"{ac['sharded_grad_diff'] < 1e-6}{more}all-gathers in forward and backward "
              f"{ac['all_gathers']['sharded_checkpointed']}, without checkpointing {ac['all_gathers']['sharded']}")
    if "order" in parts:
        order = extras["order"]
        print(f"Adam created before fully_shard: it holds {order['model_params_held']} of the model's "
              f"{order['model_params']} parameters"
              f"{more}its step changed the model: {order['model_changed']}")


def print_counted(runs2: dict) -> None:
    """Print rank 0's bytes of parameters, gradients and Adam's state under DDP, ZeRO-1 and FSDP2 on 2
    ranks, counted from its tensors' sizes, and the ZeRO formula's bytes for DDP."""
    for s in ("ddp", "zero1", "fsdp"):  # the variants in their own sections
        print(f"{s:<6} rank 0 holds {counted(runs2[s][0]) / 1e6:.3f} MB of parameters, gradients and Adam's state")
    print("(DDP's bucket copy comes on top: next section)")
    n = runs2["ddp"][0]["n_params"]
    print(f"the formula for DDP: {n:,} parameters x 16 bytes = {n * 16 / 1e6:.3f} MB")


def print_formula_gap(runs: dict, world_size: int) -> bool:
    """Print the largest gap between a rank's count and the ZeRO formula, over every strategy (variants
    included) and rank, and whether it is within 0.005 MB. Returns that verdict."""
    gap = formula_gap(runs, world_size)
    print(f"{world_size} ranks, every strategy and rank: the largest gap from the ZeRO formula is {gap:,} B; "
          f"within 0.005 MB: {gap < 5e3}")
    return gap < 5e3


def print_bucket_copy(runs2: dict) -> None:
    """Print rank 0's gradient storages and DDP's bucket under ``ddp`` and ``ddp_view``, the bytes it holds
    with and without DDP's bucket copy, and both ranks' bucket copy beside the gradients' bytes."""
    for s in ("ddp", "ddp_view"):
        layout = runs2[s][0]["layout"]
        print(f"{s:>8}: gradients in {layout['gradient_storages']} storage(s), DDP's bucket of "
              f"{layout['bucket_bytes'] / 1e6:.2f} MB; every gradient lies inside it: "
              f"{layout['gradients_inside_buckets']}")
    for s in ("ddp", "ddp_view"):
        r = runs2[s][0]
        print(f"{s:>8}: rank 0 holds {counted(r) / 1e6:.3f} MB counted, {held(r) / 1e6:.3f} MB with DDP's bucket copy")
    copy = {s: [held(r) - counted(r) for r in runs2[s]] for s in ("ddp", "ddp_view")}
    print(f"bucket copy per rank: ddp {copy['ddp']} B, ddp_view {copy['ddp_view']} B; "
          f"the gradients: {runs2['ddp'][0]['bytes']['gradients']:,} B")


def print_zero1(runs2: dict) -> None:
    """Print ZeRO-1's collectives in one step (rank 0, both settings), each rank's share of DDP's
    optimizer state, and the bytes sent against DDP's by the ring model. The lesson compares the losses
    and the share itself."""
    for s in ("zero1", "zero1_view"):
        print(f"{s}, one step:", in_words(runs2[s][0]["collectives"]))
    ddp_state = runs2["ddp"][0]["bytes"]["optimizer state"]
    ratios = [r["bytes"]["optimizer state"] / ddp_state for r in runs2["zero1"]]
    print("optimizer state per rank, as a share of DDP's:", [round(x, 3) for x in ratios])
    more = bytes_sent(runs2["zero1"][0]["payloads"], 2) / bytes_sent(runs2["ddp"][0]["payloads"], 2)
    print(f"bytes a rank sends per step, by the ring model on the traced sizes, ZeRO-1 over DDP: {more:.2f}x, "
          f"more than DDP: {more > 1}")


def print_fsdp(runs2: dict) -> None:
    """Print FSDP2's collectives in one step (rank 0, with and without reshard) and what the forward
    leaves held on rank 0. The lesson compares the losses itself."""
    strategies = ("fsdp", "fsdp_no_reshard")
    for s in strategies:
        print(f"{s}, one step:", in_words(runs2[s][0]["collectives"]))
    for s in strategies:
        print(f"{s:<16} the forward leaves {runs2[s][0]['bytes']['activations'] / 1e6:.3f} MB held on rank 0")


def print_seeded(job4: list[dict]) -> None:
    """Print, from ``seeded_by_rank`` on 4 ranks, whether the full weights agree across the ranks and are
    rank 0's under DDP and FSDP2, and under FSDP2 each rank's shard sum beside its own initial rows' sum."""
    seeded = [r["seeded"] for r in job4]
    header = ("seeded by rank, then", "gathered weights agree across ranks", "rank 0's initial weights")
    print(f"{header[0]:<22}{header[1]:>38}{header[2]:>26}")
    for way, name in (("ddp", "DDP"), ("fsdp", "FSDP2 over 4 ranks")):
        same = all(r[way]["same_on_every_rank"] for r in seeded)
        rank0s = all(r[way]["rank0s_weights"] for r in seeded)
        print(f"{name:<22}{same!s:>38}{rank0s!s:>26}")
    print("under FSDP2, the sum of each rank's shard of the first weight, and of the same rows of its own "
          "initial weight:")
    for r in seeded:
        shard_sum, own_sum = r["own_rows_sums"]
        print(f"    rank {r['rank']}: {shard_sum:+.4f} and {own_sum:+.4f}")


def print_memory_ratios(runs2: dict, runs4: dict) -> bool:
    """Print what FSDP2 holds on rank 0 against DDP (with the bucket view, and plain) on 2 and 4 ranks,
    whether that is 1/N within 0.01, and whether every rank's Python-visible tensors, found between
    two steps, add up to the count within 0.005 MB. Returns the 1/N verdict."""
    ratio = {}
    for n, runs in ((2, runs2), (4, runs4)):
        fsdp, ddp = held(runs["fsdp"][0]), runs["ddp"][0]
        ratio[n] = fsdp / counted(ddp)  # counted: DDP without its bucket copy, as the bucket view holds
        print(f"{n} ranks: FSDP2 holds {ratio[n]:.2f} of DDP less its bucket copy, {fsdp / held(ddp):.2f} of plain DDP")
    one_over_n = all(abs(x - 1 / n) < 0.01 for n, x in ratio.items())
    print("FSDP2 holds 1/N of DDP less its bucket copy, within 0.01, on 2 and 4 ranks:", one_over_n)
    sharded = [r for runs in (runs2, runs4) for s in ("fsdp", "fsdp_no_reshard") if s in runs for r in runs[s]]
    gap = max(abs(r["measured"]["live tensors"] - counted(r)) for r in sharded)
    print("FSDP2, every rank, 2 and 4 ranks: every Python-visible tensor, found and added up between two steps, "
          "equals the count within 0.005 MB:", gap < 5e3)
    return one_over_n


def print_checkpoint(saved: list[dict]) -> bool:
    """Print ``checkpoint_job``'s results: rank 0's losses straight and resumed, whether the resumed steps
    and final parameters match, and each rank's full state dict. Returns whether both match."""
    straight, resumed = saved[0]["straight"], saved[0]["resumed"]
    print("straight:", straight["losses"])
    print("resumed at step", resumed["start_step"], ":", resumed["losses"])
    same_losses = resumed["losses"] == straight["losses"][resumed["start_step"]:]
    print("the resumed steps have the same losses:", same_losses)
    print("and the same final parameters:", resumed["checksum"] == straight["checksum"])
    for r in saved:
        export = r["export"]
        loads = export["loads_into_plain_model"] if export["entries"] else f"(rank {export['rank']} holds none)"
        print(f"full state dict, rank {export['rank']}: {export['entries']} entries, no DTensor among them: "
              f"{export['plain_tensors']}, loads into the plain model with the same weights: {loads}")
    return same_losses and resumed["checksum"] == straight["checksum"]


def print_hsdp_checks(job4: list[dict], runs4: dict) -> None:
    """Print the HSDP step's checks from the 4-rank job: each collective ran in its group, the share
    of the parameters a rank holds against FSDP2 over all 4 ranks, and whether ranks seeded by rank end
    with equal full weights. The lesson compares the gradient with one process's itself."""
    hsdp = [r["hsdp"] for r in job4]
    print("on every rank, each collective ran in the group printed above:", hsdp_groups_match(hsdp))
    fsdp4 = runs4["fsdp"]  # FSDP2 over all 4 ranks: each rank's parameter bytes, over the whole model's in float32
    fsdp_share = sum(r["bytes"]["parameters"] for r in fsdp4) / len(fsdp4) / (4 * fsdp4[0]["n_params"])
    print(f"a rank holds {hsdp_share(hsdp):.2f} of the model's parameters on average; "
          f"FSDP2 over all 4 ranks: {fsdp_share:.2f}")
    print("HSDP on the 2x2 grid, each rank seeded by its rank: full weights equal on every rank:",
          all(r["seeded"]["hsdp"]["same_on_every_rank"] for r in job4))


def print_step_verdicts(kept: dict, runs2: dict) -> None:
    """Print whether FSDP2's fastest step, either setting, was slower than DDP's in every kept run
    (recorded earlier) and in the live run ``runs2``."""
    print("recorded, in every kept run, FSDP2's fastest step, either setting, is slower than DDP's:",
          fsdp_step_times.slower_than_ddp(kept))
    print("live, this machine: FSDP2's fastest step, either setting, is slower than DDP's:",
          fsdp_step_times.slower_than_ddp(fsdp_step_times.live_run(runs2)))


def bucket_copy_gone(runs2: dict) -> bool:
    """Lesson 10's DDP verdict, from every rank on 2 ranks: plain DDP's buckets are a second copy as
    large as the gradients (the gradients lie outside them), ``ddp_view``'s hold the gradients
    themselves (no copy), and the two runs' losses agree within 1e-6."""
    grad = runs2["ddp"][0]["bytes"]["gradients"]
    copy = {s: [0 if r["layout"]["gradients_inside_buckets"] else r["layout"]["bucket_bytes"] for r in runs2[s]]
            for s in ("ddp", "ddp_view")}
    gap = max(abs(a - b) for a, b in zip(runs2["ddp"][0]["losses"], runs2["ddp_view"][0]["losses"]))
    return all(c == grad for c in copy["ddp"]) and all(c == 0 for c in copy["ddp_view"]) and gap < 1e-6


def hsdp_groups_match(hsdp: list[dict]) -> bool:
    """Lesson 10's HSDP verdict: on every rank, the all-gathers and reduce-scatters ran in its shard
    group only, and the all-reduces in its replicate group only. ``hsdp``: ``print_hsdp``'s list."""
    return all(r["groups"] == {"all_gather": [r["shard_group"]], "reduce_scatter": [r["shard_group"]],
                               "all_reduce": [r["replicate_group"]]} for r in hsdp)


def precision_verdict(rel_err: float, bound: float) -> str:
    """The relative error, whether it is below ``bound``, and about how many significant digits it keeps."""
    digits = math.floor(-math.log10(rel_err)) if rel_err > 0 else "all"
    return f"{rel_err:.1%}, below {bound:.0%}: {rel_err < bound}; significant digits about {digits}"
