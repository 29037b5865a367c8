"""Pictures for lesson 08: all-reduce time and bandwidth against message size, the bucket
sweep, and scaling with the number of ranks. Each takes a benchmark's measure() result."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from ddp_lib.bench.report import human_bytes


def _positive(values: list[float]) -> tuple[list[float], int]:
    """``values`` with every value that is not above zero replaced by NaN (a log axis cannot show
    it), and how many were replaced, so that the picture can say so instead of dropping them."""
    kept = [v if v > 0 else math.nan for v in values]
    return kept, sum(1 for v in values if not v > 0)


def plot_allreduce(result: dict, fits: dict[int, tuple[float, float]] | None = None, fit_from: int = 0):
    """Left: time of one all-reduce against size (the middle half of the repeats as a band, and
    the fitted alpha-beta model dashed: ``fits`` {world size: (alpha s, beta B/s)} drawn from ``fit_from``
    bytes up, else the result's "models"); right: algbw and busbw against size, with the memory-copy and
    loopback limits as horizontal lines, each named inside the plot. At 2 ranks busbw equals algbw, and
    the legend says so; more ranks than the result's cores are labelled oversubscribed. A third, small
    panel sets the largest size's busbw of each world size beside the two limits on a linear axis, where
    the log axis squashes them together. Returns the Figure."""
    fig, (left, right, limits) = plt.subplots(1, 3, figsize=(14, 4.4), gridspec_kw={"width_ratios": [1, 1, 0.6]})
    not_drawn = 0
    for world_size in sorted({r["world_size"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["world_size"] == world_size]
        sizes = [r["bytes"] for r in rows]
        times, missing = _positive([r["time_us"] for r in rows])
        not_drawn += missing
        cores = result.get("cpu_count", world_size)
        name = f"{world_size} ranks" + (f" on {cores} cores (oversubscribed)" if world_size > cores else "")
        line, = left.plot(sizes, times, marker="o", markersize=3, label=name)
        if all("q1_us" in r for r in rows):
            left.fill_between(sizes, [r["q1_us"] for r in rows], [r["q3_us"] for r in rows],
                              color=line.get_color(), alpha=0.2, linewidth=0)
        model = [(m["alpha_us"], m["beta_gbs"]) for m in result.get("models", []) if m["world_size"] == world_size]
        if fits is not None:
            model = [(fits[world_size][0] * 1e6, fits[world_size][1] / 1e9)] if world_size in fits else []
        if model:
            (alpha_us, beta_gbs), fitted = model[0], [s for s in sizes if s >= fit_from]
            left.plot(fitted, [alpha_us + s / (beta_gbs * 1e3) for s in fitted], linestyle="--",
                      color=line.get_color(), label=f"{alpha_us:.0f} us + size / {beta_gbs:.2f} GB/s")
        # From bytes and time, not the table's rounded GB/s: small messages round to 0.000 there.
        algbw, missing = _positive([r["bytes"] / (r["time_us"] * 1e-6) / 1e9 if r["time_us"] > 0 else 0.0
                                    for r in rows])
        not_drawn += missing
        factor = 2 * (world_size - 1) / world_size
        busbw = [v * factor for v in algbw]
        if world_size == 2:  # 2(N-1)/N = 1: one line is both
            right.plot(sizes, busbw, marker="s", markersize=4, color=line.get_color(),
                       label="busbw = algbw, 2 ranks")
        else:
            right.plot(sizes, busbw, marker="s", markersize=4, color=line.get_color(),
                       label=f"busbw, {name}")
            right.plot(sizes, algbw, marker="o", markersize=3, linestyle="--", color=line.get_color(),
                       label=f"algbw, {name}")
    right.axhline(result["copy_gbs"], color="grey", label="memory copy (1 thread)")
    right.axhline(result["loopback_gbs"], color="black", linestyle=":", label="loopback socket")
    # One name above its line at the left, the other below its line at the right: apart on the log axis.
    for gbs, name, color, va, x, ha in ((result["copy_gbs"], "memory copy", "grey", "bottom", 0.02, "left"),
                                        (result["loopback_gbs"], "loopback", "black", "top", 0.98, "right")):
        right.text(x, gbs, name, transform=right.get_yaxis_transform(), va=va, ha=ha, fontsize=8, color=color)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("time of one all-reduce (µs)")
    left.set_title("time: median, middle half, fitted model")
    left.legend(fontsize=9)
    right.set_yscale("log")
    right.set_ylabel("GB/s")
    right.set_title("bandwidth against size")
    right.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    _plot_limits(limits, result)
    if not_drawn:
        fig.text(0.01, 0.01, f"{not_drawn} point(s) of zero not drawn on the log axes", fontsize=8)
    fig.tight_layout()
    return fig


def _plot_limits(ax, result: dict) -> None:
    """Horizontal bars on a linear axis: each world size's busbw at the largest size, then the loopback
    socket and one thread's memory copy, each bar's value written at its end."""
    cores = result.get("cpu_count")
    bars = []
    for world_size in sorted({r["world_size"] for r in result["rows"]}):
        largest = max((r for r in result["rows"] if r["world_size"] == world_size), key=lambda r: r["bytes"])
        crowded = "\n(oversubscribed)" if cores and world_size > cores else ""
        bars.append((f"busbw {human_bytes(largest['bytes'])},\n{world_size} ranks{crowded}",
                     largest["bytes"] / (largest["time_us"] * 1e3) * 2 * (world_size - 1) / world_size, "tab:blue"))
    bars += [("loopback", result["loopback_gbs"], "black"), ("memory copy", result["copy_gbs"], "grey")]
    positions = range(len(bars))
    ax.barh(positions, [value for _, value, _ in bars], color=[color for _, _, color in bars], alpha=0.7)
    ax.set_yticks(list(positions), [label for label, _, _ in bars], fontsize=8)
    ax.invert_yaxis()  # read top to bottom: the measured plateau, then the limits
    top = max(value for _, value, _ in bars)
    for position, (_, value, _) in zip(positions, bars):
        ax.text(value + 0.02 * top, position, f"{value:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, 1.2 * top)
    ax.set_xlabel("GB/s (linear)")
    ax.set_title("plateau and limits")
    ax.grid(axis="x", alpha=0.3)


def plot_buckets(result: dict):
    """All-reduces per step for each bucket_cap_mb: bars from the second step on, and a dot for the first
    step where the rows record it. Counts only, no time: a count does not move with the load. Returns the Figure."""
    rows = result["rows"]
    labels = [r["label"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.bar(labels, [r["allreduces"] for r in rows], color="tab:red", alpha=0.7, label="from the second step on")
    first = [r.get("first_step_allreduces") for r in rows]
    if None not in first:
        ax.plot(labels, first, linestyle="", marker="o", color="black", label="first step")
    for position, row in enumerate(rows):
        # the count above its bar, clear of the first step's dot (at 1, the height of a bar of 1)
        ax.text(position, row["allreduces"] + 0.15, str(row["allreduces"]), ha="center", va="bottom", fontsize=9)
    ax.set_xlabel("bucket_cap_mb (MiB)")
    ax.set_ylabel("all-reduces per step")
    ax.set_ylim(0, 1.3 * max(r["allreduces"] for r in rows) + 0.5)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(f"DDP on {result['world_size']} ranks: all-reduces per step, counted")
    fig.tight_layout()
    return fig


def plot_bucket_sweep(result: dict):
    """A kept bucket run, paired: for each bucket_cap_mb on a log axis, the median over the rounds of (the
    cap's step minus the default's step in the same round), with the middle half of those differences as
    a bar, and zero (no difference) marked. Each point is labelled with its all-reduces per step and in how
    many rounds the default's step was the shorter, the count the sign test judges. Returns the Figure."""
    from ddp_lib.bench.stats import median, quartiles

    rows = [r for r in result["rows"] if r["bucket_cap_mb"] is not None]
    default = next(r for r in result["rows"] if r["bucket_cap_mb"] is None)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.axhline(0, color="tab:gray", linestyle="--",
               label=f"0: same as the default ({default['allreduces']} all-reduces/step)")
    caps = [r["bucket_cap_mb"] for r in rows]
    diffs = [[c - d for c, d in zip(r["rounds_ms"], default["rounds_ms"])] for r in rows]
    medians = [median(d) for d in diffs]
    spreads = [quartiles(d) for d in diffs]
    ax.errorbar(caps, medians, yerr=[[m - q1 for m, (q1, _) in zip(medians, spreads)],
                                     [q3 - m for m, (_, q3) in zip(medians, spreads)]],
                marker="o", color="tab:red", capsize=3,
                label="cap minus default, same round: median and middle half")
    for cap, m, row, d in zip(caps, medians, rows, diffs):  # beside its median, clear of the middle half's bar
        won = sum(x > 0 for x in d)
        ax.annotate(f"{row['allreduces']}; {won}", (cap, m), textcoords="offset points", xytext=(5, 3), fontsize=8)
    top = max([q3 for _, q3 in spreads] + [0.0])
    bottom = min([q1 for q1, _ in spreads] + [0.0])
    ax.set_ylim(bottom - 0.1 * (top - bottom), top + 0.45 * (top - bottom))  # room for the legend
    ax.set_xscale("log")
    ax.set_xticks(caps, [f"{c:g}" for c in caps])
    ax.set_xlabel("bucket_cap_mb (MiB, log scale); labels: all-reduces per step; rounds the default won")
    ax.set_ylabel("cap's step - default's step (ms)")
    ax.set_title(f"DDP on {result['world_size']} ranks, {result['repeats']} paired rounds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def plot_scaling(result: dict):
    """Samples per second against ranks, one line per threads policy, with the ideal dotted: the
    1-rank rate times the ranks, up to the result's core count ("cpu_count"). Returns the Figure."""
    cores = result.get("cpu_count") or max(r["world_size"] for r in result["rows"])
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for policy in sorted({r["policy"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["policy"] == policy]
        ranks = [r["world_size"] for r in rows]
        line, = ax.plot(ranks, [r["samples_per_s"] for r in rows], marker="o", label=f"threads: {policy}")
        # More ranks than cores cannot add speed: the ideal stops growing at the core count.
        ax.plot(ranks, [rows[0]["samples_per_s"] * min(n, cores) / ranks[0] for n in ranks], linestyle=":",
                color=line.get_color(), label=f"ideal: 1-rank rate x min(ranks, {cores} cores)")
    ax.set_xticks(sorted({r["world_size"] for r in result["rows"]}))
    ax.set_xlabel("ranks (world_size)")
    ax.set_ylabel("samples per second")
    ax.set_title("training throughput against ranks")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def _lane_bars(ax, row: int, spans: list[tuple[float, float]], color: str, height: float = 0.6) -> None:
    ax.broken_barh([(start, end - start) for start, end in spans], (row - height / 2, height),
                   facecolor=color, edgecolor="black", linewidth=0.5)


def draw_overlap_schematic():
    """Schematic: backward computes layer gradients last layer first; each bucket's all-reduce
    starts once its gradients are in and one of gloo's two threads is free, while backward goes
    on; a bucket ready while both threads are busy waits (dotted). The step waits only for the
    last one. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(8, 2.8))
    layers = [(0, 2), (2, 4), (4, 6), (6, 8)]
    _lane_bars(ax, 2, layers, "tab:blue")
    for i, (start, end) in enumerate(layers):
        ax.text((start + end) / 2, 2, f"layer {len(layers) - i}", ha="center", va="center", color="white", fontsize=9)
    # (bucket, thread, ready, start, end): gloo runs a bucket on the first thread free after it is ready
    buckets = [(0, 1, 2, 2, 6.5), (1, 0, 4, 4, 8.5), (2, 1, 6, 6.5, 9.5), (3, 0, 8, 8.5, 11)]
    for index, thread, ready, start, end in buckets:
        _lane_bars(ax, thread, [(start, end)], "tab:orange")
        ax.text((start + end) / 2, thread, f"bucket {index}", ha="center", va="center", fontsize=9)
        if start > ready:
            ax.plot([ready, start], [thread, thread], color="black", linestyle=":", linewidth=1.5)
    ax.axvline(8, color="black", linestyle="--", linewidth=1)
    ax.text(8.1, 2.55, "backward ends", fontsize=9)
    ax.set_yticks([0, 1, 2], ["gloo thread 2", "gloo thread 1", "backward"])
    ax.set_ylim(-0.6, 2.8)
    ax.set_xticks([])
    ax.set_xlabel("time")
    ax.set_title("overlap on two gloo threads: a ready bucket waits (dotted) until a thread is free")
    fig.tight_layout()
    return fig


def plot_overlap(result: dict):
    """One profiled DDP step on rank 0 (ddp_lib.bench.overlap): backward's operators on the
    training thread, gloo's all-reduces on its worker threads (each on its own row, as two may
    run at once), and a dashed line where backward's computation ends. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(9, 2.8))
    backward = [(r["start_ms"], r["end_ms"]) for r in result["rows"] if r["lane"] == "backward"]
    allreduces = [(r["start_ms"], r["end_ms"]) for r in result["rows"] if r["lane"] == "all-reduce"]
    _lane_bars(ax, len(allreduces), backward, "tab:blue")
    for i, span in enumerate(allreduces):
        _lane_bars(ax, len(allreduces) - 1 - i, [span], "tab:orange")
    # As ddp_lib.bench.overlap.computation_end_ms: the last bucket starts once every gradient is in.
    end = min(max(stop for _, stop in backward), max(start for start, _ in allreduces))
    ax.axvline(end, color="black", linestyle="--", linewidth=1)
    ax.text(end, len(allreduces) + 0.45, " backward's computation ends", fontsize=9)
    ax.set_yticks(range(len(allreduces) + 1),
                  [f"all-reduce {len(allreduces) - 1 - i}" for i in range(len(allreduces))] + ["backward"])
    ax.set_ylim(-0.6, len(allreduces) + 0.8)
    ax.set_xlabel("ms since the profiled step began (rank 0)")
    ax.set_title(f"one DDP step, bucket_cap_mb={result['bucket_cap_mb']:g}: measured with torch.profiler")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_step_breakdown(breakdowns: dict[str, dict[str, float]]):
    """Measured steps split into their parts (ddp_lib.bench.overlap.breakdown), one bar per label of
    ``breakdowns``, parts stacked left to right in the order the step runs them. Returns the Figure."""
    colors = {"forward": "tab:green", "backward computation": "tab:blue",
              "communication not hidden": "tab:orange", "optimizer": "tab:purple"}
    fig, ax = plt.subplots(figsize=(9, 0.7 * len(breakdowns) + 1.4))
    for row, parts in enumerate(breakdowns.values()):
        left = 0.0
        for part, ms in parts.items():
            ax.barh(row, ms, left=left, color=colors[part], edgecolor="black", linewidth=0.5,
                    label=part if row == 0 else None)
            left += ms
    ax.set_yticks(range(len(breakdowns)), list(breakdowns))
    ax.invert_yaxis()
    ax.set_xlabel("ms of one profiled step (rank 0)")
    ax.set_title("where a DDP step's time went, measured with torch.profiler\n"
                 "bars: median of each part; they need not add up to the median step")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def draw_oversubscription(ranks: int = 4, cores: int = 2, slices: int = 6):
    """Schematic: ``ranks`` processes on ``cores`` cores take turns (the scheduler gives each a
    slice, then another rank runs). A ring step needs its two neighbours running at once; when one
    is off its core, the other waits. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(8, 0.5 * ranks + 1.2))
    for rank in range(ranks):
        running = [(t, 1) for t in range(slices) if (t + rank // cores) % (ranks // cores) == 0]
        waiting = [(t, 1) for t in range(slices) if (t + rank // cores) % (ranks // cores) != 0]
        ax.broken_barh(running, (rank - 0.3, 0.6), facecolor="tab:green", edgecolor="black", linewidth=0.5)
        ax.broken_barh(waiting, (rank - 0.3, 0.6), facecolor="lightgrey", edgecolor="black", linewidth=0.5)
    # gloo's ring sends to rank - 1. Rank 2 sends in its slice; rank 1 can take the message only
    # in its own, one slice later.
    ax.annotate("", xy=(2.15, 1 + 0.3), xytext=(1.85, 2 - 0.3),
                arrowprops={"arrowstyle": "->", "color": "black", "linewidth": 1.5})
    ax.text(2.2, 1.5, "rank 2's message waits for rank 1's turn", fontsize=9, va="center")
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.invert_yaxis()
    ax.set_xticks([])
    ax.set_xlabel("time, in the scheduler's slices")
    ax.set_title(f"{ranks} ranks on {cores} cores: green runs, grey waits for a core")
    fig.tight_layout()
    return fig


def draw_alpha_beta_sketch(alpha_us: float = 300.0, beta_gbs: float = 1.0):
    """Schematic of t(S) = alpha + S / beta on log axes: a flat floor at alpha for small S, a
    slope of 1 / beta for large S, and the half-bandwidth size S1/2 = alpha * beta where the two
    meet (there the bytes cost exactly alpha). Returns the Figure."""
    sizes = [2.0 ** k for k in range(2, 27)]
    bytes_us = [s / (beta_gbs * 1e3) for s in sizes]  # S / beta in µs
    half = alpha_us * beta_gbs * 1e3
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    ax.plot(sizes, [alpha_us + b for b in bytes_us], color="black", linewidth=2, label="t = α + S / β")
    ax.plot(sizes, [alpha_us] * len(sizes), linestyle="--", color="tab:blue", label="α: the floor, paid per call")
    ax.plot(sizes, bytes_us, linestyle="--", color="tab:orange", label="S / β: the bytes, grows with S at rate 1 / β")
    ax.axvline(half, color="grey", linestyle=":")
    ax.text(half * 1.2, alpha_us / 20, "S½ = αβ\n(bytes cost α)", fontsize=9)
    ax.text(sizes[1], alpha_us * 2.2, "latency-bound", fontsize=9)
    ax.text(half * 2, alpha_us * 0.4, "bandwidth-bound", fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(alpha_us / 40, max(bytes_us) * 2)
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("time of one all-reduce (µs)")
    ax.set_title("the alpha-beta model (a sketch, not a measurement)")
    ax.legend(fontsize=9, loc="upper left")
    fig.tight_layout()
    return fig


def draw_gloo_ring(sends: list[dict], world_size: int, nbytes: int):
    """gloo's ring all-reduce as a grid: one row per rank, one column per iteration of its two
    phases; a box where that rank sends a segment with data (to rank - 1), labelled with the
    segment. ``sends`` is ddp_lib.bench.gloo_ring.ring_sends(nbytes, world_size). Returns the Figure."""
    per_phase = 2 * (world_size - 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * 2 * per_phase + 1.5), 0.55 * world_size + 1.6))
    for s in sends:
        column = s["iteration"] + (per_phase if s["phase"] == "all-gather" else 0)
        color = "tab:orange" if s["phase"] == "reduce-scatter" else "tab:green"
        ax.broken_barh([(column, 0.9)], (s["rank"] - 0.35, 0.7), facecolor=color, edgecolor="black", linewidth=0.5)
        ax.text(column + 0.45, s["rank"], f"{s['segment']}→r{s['to']}", ha="center", va="center", fontsize=8)
    ax.axvline(per_phase - 0.05, color="black", linewidth=1)
    ax.text(per_phase / 2, -0.8, "reduce-scatter", ha="center", fontsize=9)
    ax.text(per_phase * 1.5, -0.8, "all-gather", ha="center", fontsize=9)
    ax.set_xlim(0, 2 * per_phase)
    ax.set_ylim(world_size - 0.4, -1.1)
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_xticks([c + 0.45 for c in range(2 * per_phase)], [str(c % per_phase) for c in range(2 * per_phase)])
    ax.set_xlabel("iteration of the phase (a box: segment k sent to rank r)")
    most = max((sum(1 for s in sends if s["rank"] == r) for r in range(world_size)), default=0)
    ax.set_title(f"gloo's ring, {world_size} ranks, {nbytes} B: {len(sends)} messages, "
                 f"at most {most} sent by one rank")
    fig.tight_layout()
    return fig


def draw_timing_schematic(arrivals: tuple[float, ...] = (0.0, 0.6), durations: tuple[float, ...] = (2.4, 1.6)):
    """Schematic of timing one collective on each rank: an untimed warm-up call, a barrier that
    all ranks leave within about one message latency, the timed call (each rank measures its own
    time), then an all-reduce with MAX that hands every rank the slowest rank's time. Returns the
    Figure."""
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(arrivals) + 1.6))
    barrier_end = 3.0 + max(arrivals)
    for rank, (late, took) in enumerate(zip(arrivals, durations)):
        _lane_bars(ax, rank, [(late, late + 2.0)], "lightgrey")  # spans are (start, end)
        ax.text(late + 1.0, rank, "warm-up", ha="center", va="center", fontsize=8)
        _lane_bars(ax, rank, [(late + 2.0, barrier_end)], "white")
        ax.text((late + 2.0 + barrier_end) / 2, rank, "barrier", ha="center", va="center", fontsize=8)
        _lane_bars(ax, rank, [(barrier_end, barrier_end + took)], "tab:orange")
        ax.text(barrier_end + took / 2, rank, f"timed: {took:g}", ha="center", va="center", fontsize=8)
        end = barrier_end + max(durations)
        _lane_bars(ax, rank, [(end, end + 0.8)], "tab:green")
        ax.text(end + 0.4, rank, "MAX", ha="center", va="center", fontsize=8)
    ax.axvline(barrier_end, color="black", linestyle="--", linewidth=1)
    ax.text(barrier_end, -0.75, "barrier: all leave within about one latency", ha="center", fontsize=8)
    ax.text(barrier_end + max(durations) + 0.4, -0.75, f"MAX: every rank learns {max(durations):g}",
            ha="center", fontsize=8)
    ax.set_xlim(-0.2, barrier_end + max(durations) + 2.0)
    ax.set_yticks(range(len(arrivals)), [f"rank {r}" for r in range(len(arrivals))])
    ax.set_ylim(len(arrivals) - 0.4, -1.1)
    ax.set_xticks([])
    ax.set_xlabel("time (rank 1 arrives late; rank 0's call takes longest)")
    ax.set_title("timing one all-reduce: warm-up, barrier, each rank's time, the slowest kept")
    fig.tight_layout()
    return fig


def fill_buckets(sizes: list[int], cap: int, rule: str) -> list[list[int]]:
    """Indices of ``sizes`` (bytes, in the order the gradients arrive) grouped into buckets.
    rule "reached": a gradient joins the open bucket, which closes once it holds cap bytes or more
    (torch's DDP). rule "overflow": a new bucket opens when the next gradient would pass the cap
    (lesson 04's BucketedOverlapDDP)."""
    buckets: list[list[int]] = [[]]
    held = 0
    for index, size in enumerate(sizes):
        if rule == "overflow" and buckets[-1] and held + size > cap:
            buckets.append([])
            held = 0
        buckets[-1].append(index)
        held += size
        if rule == "reached" and held >= cap:
            buckets.append([])
            held = 0
    return [b for b in buckets if b]


def draw_bucket_rules(sizes: list[int], cap: int, rules: tuple[str, ...] = ("reached", "overflow")):
    """Schematic: the same gradients (bytes, in arrival order) packed by the rules of fill_buckets
    named in ``rules``, one row each; each gradient a box as wide as its bytes (at least a sliver), the
    buckets told apart by colour and each numbered (a sliver by its number alone, below). Returns the Figure."""
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * len(rules)))
    widths = [max(size / cap, 0.04) for size in sizes]
    names = {"reached": "torch: closes once it reached the cap",
             "overflow": "lesson 04: closes before it would overflow"}
    rows = {names[rule]: rule for rule in rules}
    colors = plt.get_cmap("tab10").colors
    for row, rule in enumerate(rows.values()):
        buckets = fill_buckets(sizes, cap, rule)
        left = 0.0
        for number, bucket in enumerate(buckets):
            start = left
            for index in bucket:
                ax.broken_barh([(left, widths[index])], (row - 0.3, 0.6), facecolor=colors[number % 10],
                               edgecolor="black", linewidth=0.5)
                left += widths[index]
            if left - start > 0.08 * sum(widths):
                ax.text(left - 0.005 * sum(widths), row - 0.38, f"bucket {number}", ha="right", fontsize=7)
            else:  # a sliver of a bucket: its number alone, below the row
                ax.text((start + left) / 2, row + 0.33, f"{number}", ha="center", va="top", fontsize=7)
        ax.text(left + 0.015 * sum(widths), row, f"{len(buckets)} all-reduces", va="center", fontsize=9)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set_ylim(len(rows) - 0.3, -0.6)
    ax.set_xlim(0, sum(widths) * 1.33)  # room on the right for the count
    ax.set_xticks([])
    ax.set_xlabel("gradients in the order backward produces them; width = bytes (cap = 1 unit)")
    ax.set_title("two ways to fill buckets, same gradients, same cap" if len(rules) > 1
                 else "torch's buckets for these gradients and this cap")
    fig.tight_layout()
    return fig
