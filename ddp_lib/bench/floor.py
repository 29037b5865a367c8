"""The alpha-beta fit against each kept run that lesson 08 uses it on: for each use, the measured time
and the model's time, in ms, and how many of the uses took longer than the model. The fit rests on the
all-reduce run's medians, so on this machine it is about a lower bound, not a forecast: load, two
all-reduces in flight or more ranks than cores only add. The fit itself moves from one recording to the
next, so a use counts against the bound only when it took less than the model by more than the fit's own
tolerance, 25% (``TOLERANCE``)."""

from __future__ import annotations

from ddp_lib.bench import model, overlap, scaling

# The fit's own tolerance (allreduce.fit_verdict's "within 25%"): a use that took less than the model by
# no more than this share is still at the bound, within the fit's error.
TOLERANCE = 0.25


def fit_uses(alpha: float, beta: float, ddp_run: dict, profile: dict, scaling_run: dict,
             wide_run: dict) -> dict[str, tuple[float, float]]:
    """Per use of the fit (``alpha`` in seconds, ``beta`` in bytes per second), (measured ms, the model's ms):
    the DDP run's bare all-reduce of its gradients; in the profile, one extra bucket's cost against
    one alpha; the moons model's 2-rank step over its 1-rank step against one all-reduce of its
    gradients; the wide model's one-bucket DDP step against half one process's step plus one all-reduce."""
    uses = {"the DDP run's bare all-reduce": (ddp_run["all_reduce_ms"],
                                              model.predict(alpha, beta, ddp_run["gradient_bytes"]) * 1e3)}
    uses["one extra bucket, under the profiler"] = (overlap.extra_bucket_ms(profile), alpha * 1e3)
    rate = {r["world_size"]: r["samples_per_s"] for r in scaling_run["rows"] if r["policy"] == "one"}
    extra_s = 2 * scaling.BATCH_SIZE / rate[2] - scaling.BATCH_SIZE / rate[1]
    uses["the moons model's extra 2-rank step"] = (extra_s * 1e3,
                                                   model.predict(alpha, beta, scaling.gradient_bytes()) * 1e3)
    step_ms = {r["way"]: r["step_ms"] for r in wide_run["rows"]}
    half_step_ms = step_ms["one process"] / 2  # each rank steps half the batch
    uses["the wide model's DDP step, one bucket"] = (
        step_ms["DDP, one bucket"], half_step_ms + model.predict(alpha, beta, wide_run["gradient_bytes"]) * 1e3)
    return uses


def floor_verdict(uses: dict[str, tuple[float, float]]) -> str:
    """One line per use, measured against the model, and a last line: in how many uses the measured time
    was longer than the model's, and whether none took less by more than ``TOLERANCE``."""
    lines = [f"{name}: measured {measured:.2f} ms, the model {predicted:.2f} ms ({measured / predicted:.1f}x)"
             for name, (measured, predicted) in uses.items()]
    above = sum(measured > predicted for measured, predicted in uses.values())
    held = all(measured >= (1 - TOLERANCE) * predicted for measured, predicted in uses.values())
    lines.append(f"measured longer than the fit in {above} of {len(uses)} uses; none more than {TOLERANCE:.0%} "
                 f"shorter, so the fit a lower bound within its tolerance: {held}")
    return "\n".join(lines)
