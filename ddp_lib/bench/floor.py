"""The alpha-beta fit against each kept run that lesson 08 uses it on, in three groups. Large messages,
where the bytes' term dominates, and bare small all-reduces, where α dominates: the fit models both, so
the verdict asks whether it came within its own tolerance, 25% (``TOLERANCE``), either way. What a 2-rank
step adds to a 1-rank step beyond its one small all-reduce (compute slowed by shared cores included, and
DDP's own work; the run records no 2-rank local step to tell them apart) lies outside the model, so that
group prints how many modelled all-reduces it took and no verdict on the fit."""

from __future__ import annotations

import statistics

from ddp_lib.bench import model, scaling

# The fit's own tolerance (allreduce.fit_verdict's "within 25%").
TOLERANCE = 0.25
LARGE, SMALL = "large messages", "bare small all-reduces"
OVERHEAD = "the 2-rank step's extra time beyond the all-reduce (compute slowed by shared cores included)"


def fit_uses(alpha: float, beta: float, allreduce_run: dict, ddp_run: dict, scaling_run: dict,
             wide_run: dict) -> dict[str, dict[str, tuple[float, float]]]:
    """Per group (``LARGE``, ``SMALL``, ``OVERHEAD``), per use of the fit (``alpha`` in seconds, ``beta`` in
    bytes per second), (measured ms, the model's ms). Large: the DDP run's bare all-reduce of its 3.7 MB of
    gradients; the wide model's one-bucket DDP step against half one process's step plus one all-reduce
    of its 42 MB. Small: the all-reduce run's 2-rank medians at the two kept sizes around the moons
    model's 648 B of gradients. Overhead: the moons model's 2-rank step over its 1-rank step against one
    all-reduce of those 648 B."""
    step_ms = {r["way"]: r["step_ms"] for r in wide_run["rows"]}
    half_step_ms = step_ms["one process"] / 2  # each rank steps half the batch
    large = {"the DDP run's bare all-reduce": (ddp_run["all_reduce_ms"],
                                               model.predict(alpha, beta, ddp_run["gradient_bytes"]) * 1e3),
             "the wide model's DDP step, one bucket": (
                 step_ms["DDP, one bucket"],
                 half_step_ms + model.predict(alpha, beta, wide_run["gradient_bytes"]) * 1e3)}
    nbytes = scaling.gradient_bytes()
    times_ms = {r["bytes"]: r["time_us"] * 1e-3 for r in allreduce_run["rows"] if r["world_size"] == 2}
    around = (max(b for b in times_ms if b <= nbytes), min(b for b in times_ms if b >= nbytes))
    small = {f"a bare all-reduce of {b} B": (times_ms[b], model.predict(alpha, beta, b) * 1e3) for b in around}
    rate = {r["world_size"]: r["samples_per_s"] for r in scaling_run["rows"] if r["policy"] == "one"}
    extra_s = 2 * scaling.BATCH_SIZE / rate[2] - scaling.BATCH_SIZE / rate[1]
    overhead = {"the moons model's extra 2-rank step": (extra_s * 1e3, model.predict(alpha, beta, nbytes) * 1e3)}
    return {LARGE: large, SMALL: small, OVERHEAD: overhead}


def within(measured: float, predicted: float) -> bool:
    """The model within ``TOLERANCE`` of the measured time, either way."""
    return abs(measured / predicted - 1) <= TOLERANCE


def floor_verdict(uses: dict[str, dict[str, tuple[float, float]]]) -> str:
    """One line per use, measured against the model, then one verdict line per group: whether the model
    came within ``TOLERANCE`` of every use, and, where every use took longer than that, about how many
    times the model (the median of the ratios). The ``OVERHEAD`` group gets no verdict on the fit: it
    prints how many modelled all-reduces that extra time took, a cost the model has no term for."""
    lines = []
    for group, group_uses in uses.items():
        ratios = [measured / predicted for measured, predicted in group_uses.values()]
        for name, (measured, predicted) in group_uses.items():
            lines.append(f"  {name}: measured {measured:.2f} ms, the model {predicted:.2f} ms "
                         f"({measured / predicted:.1f}x)")
        if group == OVERHEAD:
            verdict = (f"{group}: {' and '.join(f'{r:.1f}x' for r in ratios)} one modelled all-reduce; "
                       "outside the model: it has no term for this time")
        else:
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
