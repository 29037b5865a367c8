"""The alpha-beta fit against each kept run that lesson 08 uses it on, in two groups. Large messages,
where the bytes' term dominates: there the fit is a model to trust, so the verdict asks whether it came
within its own tolerance, 25% (``TOLERANCE``), either way. Small messages and extra calls, where only α
counts: there the fit rests on the all-reduce run's medians of single calls, while load, two all-reduces
in flight or DDP's own work only add, so the verdict prints how many times the model they took."""

from __future__ import annotations

import statistics

from ddp_lib.bench import model, overlap, scaling

# The fit's own tolerance (allreduce.fit_verdict's "within 25%").
TOLERANCE = 0.25
LARGE, SMALL = "large messages", "small messages"


def fit_uses(alpha: float, beta: float, ddp_run: dict, profile: dict, scaling_run: dict,
             wide_run: dict) -> dict[str, dict[str, tuple[float, float]]]:
    """Per group (``LARGE``, ``SMALL``), per use of the fit (``alpha`` in seconds, ``beta`` in bytes per
    second), (measured ms, the model's ms). Large: the DDP run's bare all-reduce of its 3.7 MB of
    gradients; the wide model's one-bucket DDP step against half one process's step plus one all-reduce
    of its 42 MB. Small: in the profile, one extra bucket's cost against one alpha; the moons model's
    2-rank step over its 1-rank step against one all-reduce of its 648 B of gradients."""
    step_ms = {r["way"]: r["step_ms"] for r in wide_run["rows"]}
    half_step_ms = step_ms["one process"] / 2  # each rank steps half the batch
    large = {"the DDP run's bare all-reduce": (ddp_run["all_reduce_ms"],
                                               model.predict(alpha, beta, ddp_run["gradient_bytes"]) * 1e3),
             "the wide model's DDP step, one bucket": (
                 step_ms["DDP, one bucket"],
                 half_step_ms + model.predict(alpha, beta, wide_run["gradient_bytes"]) * 1e3)}
    rate = {r["world_size"]: r["samples_per_s"] for r in scaling_run["rows"] if r["policy"] == "one"}
    extra_s = 2 * scaling.BATCH_SIZE / rate[2] - scaling.BATCH_SIZE / rate[1]
    small = {"one extra bucket, under the profiler": (overlap.extra_bucket_ms(profile), alpha * 1e3),
             "the moons model's extra 2-rank step": (extra_s * 1e3,
                                                     model.predict(alpha, beta, scaling.gradient_bytes()) * 1e3)}
    return {LARGE: large, SMALL: small}


def within(measured: float, predicted: float) -> bool:
    """The model within ``TOLERANCE`` of the measured time, either way."""
    return abs(measured / predicted - 1) <= TOLERANCE


def floor_verdict(uses: dict[str, dict[str, tuple[float, float]]]) -> str:
    """One line per use, measured against the model, then one verdict line per group: whether the model
    came within ``TOLERANCE`` of every use, and, where every use took longer than that, about how many
    times the model (the median of the ratios)."""
    lines = []
    for group, group_uses in uses.items():
        ratios = [measured / predicted for measured, predicted in group_uses.values()]
        for name, (measured, predicted) in group_uses.items():
            lines.append(f"  {name}: measured {measured:.2f} ms, the model {predicted:.2f} ms "
                         f"({measured / predicted:.1f}x)")
        verdict = (f"{group}: measured / model {' and '.join(f'{r:.1f}x' for r in ratios)}; "
                   f"the model within {TOLERANCE:.0%} of each: "
                   f"{all(within(*use) for use in group_uses.values())}")
        if min(ratios) > 1 + TOLERANCE:
            verdict += (f"; the model underestimates them about {statistics.median(ratios):.1f}x "
                        "on this machine: for them it is a floor")
        elif max(ratios) < 1 - TOLERANCE:
            verdict += f"; the model overestimates them about {1 / statistics.median(ratios):.1f}x"
        lines.insert(len(lines) - len(group_uses), verdict)
    return "\n".join(lines)
