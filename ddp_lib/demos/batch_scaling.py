"""Lesson 05's batch-size and learning-rate runs: the numbers the lesson quotes from the jobs of "The same
job on 1, 2 and 4 ranks", which also train the runs of "The learning rate for a bigger global batch".

    runs = run_scaling_jobs(two_rank_losses)  # the three jobs, then global_batch_curves on their results
    scaling = summarize_lr_scaling(runs["lr_losses"], runs["one_rank_losses"])
    print(lr_scaling_report(scaling))  # the lines the lesson prints

The jobs run ``train`` (``ddp_lib/workers/train.py``), the same loop as lesson 05's ``diff_loop``, with its
losses within 1e-5. :func:`run_scaling_jobs` starts them; the other functions are the arithmetic alone.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

SEEDS = range(3)
WARMUP_STEPS = 8  # one epoch of 4 ranks x 16: 512 samples / 64
SETTINGS = {"lr 0.1": dict(lr=0.1), "lr 0.4": dict(lr=0.4), "lr 0.4, warm-up": dict(lr=0.4, warmup_steps=WARMUP_STEPS)}
ONE_RANK = "1 rank, lr 0.1 (global batch 16)"
FOUR_RANKS = {"lr 0.1": "4 ranks, lr 0.1 (global batch 64)", "lr 0.4": "4 ranks, lr 0.4 (global batch 64)",
              "lr 0.4, warm-up": f"4 ranks, lr 0.4, warm-up {WARMUP_STEPS} steps (global batch 64)"}


def global_batch_curves(two_ranks_16: list[float], global_64: dict[str, dict], one_rank_16: list[dict]) -> dict:
    """Compare the global-batch-64 runs ``global_64`` ({label: rank 0's result of ``train``}, the last
    on 4 ranks x 16) and gather the batch-16-per-rank curves: ``one_rank_16`` holds 1 rank's results at
    batch 16, one per seed in ``SEEDS`` (seed 0 first), and ``two_ranks_16`` the losses of a 2-rank,
    batch-16 run. The lesson trains them all in three jobs, one per world size, before calling this.

    Returns {"per_rank_16": {label: losses}, "global_64": {label: losses}, "global_64_params": {label:
    final parameters, flattened} (the lesson's cell compares them), and "one_rank_losses": 1 rank at batch
    16, per seed (the learning-rate runs compare with them)}."""
    four_16 = list(global_64.values())[-1]
    per_rank_16 = {f"{n} rank{'s' if n > 1 else ''}, global batch {16 * n}": losses
                   for n, losses in {1: one_rank_16[0]["losses"], 2: two_ranks_16, 4: four_16["losses"]}.items()}
    return {"per_rank_16": per_rank_16,
            "global_64": {label: r["losses"] for label, r in global_64.items()},
            "global_64_params": {label: r["params"] for label, r in global_64.items()},
            "one_rank_losses": [r["losses"] for r in one_rank_16]}


def summarize_lr_scaling(losses: dict[str, list[list[float]]], one_rank_losses: list[list[float]]) -> dict:
    """The numbers the lesson quotes. ``losses`` maps "lr 0.1" and "lr 0.4" (4 ranks), and optionally
    "lr 0.4, warm-up", to one loss curve per seed; ``one_rank_losses`` holds 1 rank's curves at lr 0.1 on
    the same seeds.

    Returns {"means" and "ranges" (per label: the seeds' mean curve, and their (lowest, highest) curves),
    "closer_every_seed" (lr 0.4 ends nearer 1 rank's final loss than lr 0.1, on each seed), "gaps"
    (mean distance of each setting's final loss from 1 rank's), "closed" (the share of lr 0.1's gap that
    lr 0.4 closes), "near" (seeds where lr 0.4 ends within 10% of the same seed's 1-rank final loss),
    "epoch_means" (each setting's mean loss per epoch), "seeds" (how many), and with the warm-up runs
    "warmup_lower_early" (their mean loss is lower than lr 0.4's without warm-up after epochs 2 and 3;
    only for runs of 3 epochs or more)}."""
    runs = [k for k in FOUR_RANKS if k in losses]  # the settings trained
    per_seed = {ONE_RANK: torch.tensor(one_rank_losses), **{FOUR_RANKS[k]: torch.tensor(losses[k]) for k in runs}}
    one_final = [curve[-1] for curve in one_rank_losses]
    finals = {k: [curve[-1] for curve in losses[k]] for k in runs}
    n = len(one_final)
    gaps = {k: sum(abs(f - o) for f, o in zip(finals[k], one_final)) / n for k in runs}
    epoch_means = {k: torch.tensor(losses[k]).mean(0).tolist() for k in runs}
    summary = {"means": {label: t.mean(0).tolist() for label, t in per_seed.items()},
            "ranges": {label: (t.min(0).values.tolist(), t.max(0).values.tolist()) for label, t in per_seed.items()},
            "closer_every_seed": all(abs(s - o) < abs(u - o)
                                     for s, u, o in zip(finals["lr 0.4"], finals["lr 0.1"], one_final)),
            "gaps": gaps,
            "closed": 1 - gaps["lr 0.4"] / gaps["lr 0.1"],
            "near": sum(abs(s - o) < 0.1 * o for s, o in zip(finals["lr 0.4"], one_final)),
            "epoch_means": epoch_means,
            "seeds": n}
    if "lr 0.4, warm-up" in losses and len(epoch_means["lr 0.4"]) >= 3:
        summary["warmup_lower_early"] = all(epoch_means["lr 0.4, warm-up"][e - 1] < epoch_means["lr 0.4"][e - 1]
                                            for e in (2, 3))
    return summary


def lr_scaling_report(scaling: dict) -> str:
    """The lines lesson 05 prints from :func:`summarize_lr_scaling`'s result: each setting's mean final
    loss with its range over the seeds, whether lr 0.4 ends nearer 1 rank on every seed, and the mean
    losses after epochs 2 and 3, on one line."""
    lines = []
    names = {"1 rank, lr 0.1": ONE_RANK, **{f"4 ranks, {k}": v for k, v in FOUR_RANKS.items() if v in scaling["means"]}}
    width = max(len(name) for name in names) + 1
    for name, label in names.items():
        low, high = (curve[-1] for curve in scaling["ranges"][label])
        lines.append(f"{name + ':':<{width}} mean final loss {scaling['means'][label][-1]:.3f} "
                     f"({scaling['seeds']} seeds: {low:.3f} to {high:.3f})")
    lines.append(f"lr 0.4 ends closer to 1 rank than lr 0.1 on every seed: {scaling['closer_every_seed']}")
    lines.append("mean loss after epochs 2 and 3: " + "; ".join(
        f"{name} {curve[1]:.3f}, {curve[2]:.3f}" for name, curve in scaling["epoch_means"].items()))
    return "\n".join(lines)


def run_scaling_jobs(two_ranks_16: list[float], epochs: int = 8) -> dict:
    """Lesson 05's three jobs, one per world size, each rank on one thread (for speed on 2 cores), run at
    the same time; one line per job ("1 rank ...", "2 ranks ...", "4 ranks ...") is printed as they start.
    Each job trains the runs of "The same job on 1, 2 and 4 ranks" (lr 0.1, seed 0) and those of the next section.
    ``two_ranks_16``: the losses of a 2-rank, batch-16 run at lr 0.1 (the lesson's diff job), the fourth
    curve.

    - 1 rank: batch 64 at lr 0.1 (seed 0), then batch 16 at lr 0.1 for each seed in ``SEEDS``;
    - 2 ranks: batch 32 per rank at lr 0.1 (seed 0), then batch 16 (the diff's job, trained by ``train``);
    - 4 ranks: batch 16 per rank for each seed and each of ``SETTINGS``: lr 0.1, lr 0.4, and lr 0.4 with
      a warm-up over its first ``WARMUP_STEPS`` steps (seed 0 at lr 0.1 first).

    Returns :func:`global_batch_curves`'s dict (the three runs at global batch 64 are the seed-0 runs at
    lr 0.1), plus "two_ranks_16_train": the losses of ``train``'s own 2-rank batch-16 run, and
    "lr_losses": the 4-rank job's loss curves, {setting: per seed} for each of ``SETTINGS``."""
    from ddp_lib.workers.train_pitfalls import train_runs  # one train per dict of arguments, in one job

    settings = [(name, s) for s in SEEDS for name in SETTINGS]
    lr_runs = [dict(epochs=epochs, batch_size=16, seed=s, **SETTINGS[name]) for name, s in settings]
    for line in ("1 rank ...", "2 ranks ...", "4 ranks ..."):
        print(line, flush=True)
    one_rank, (two_ranks_32, two_ranks_16_train), four_ranks = _rank0_results_at_once([
        (train_runs, 1, dict(runs=[dict(epochs=epochs, batch_size=64, lr=0.1)] + [
            dict(epochs=epochs, batch_size=16, lr=0.1, seed=s) for s in SEEDS])),
        (train_runs, 2, dict(runs=[dict(epochs=epochs, batch_size=b, lr=0.1) for b in (32, 16)])),
        (train_runs, 4, dict(runs=lr_runs)),  # every setting on each seed; seed 0 at lr 0.1 is this section's run
    ])
    global_64 = {"1 rank x batch 64": one_rank[0], "2 ranks x batch 32": two_ranks_32,
                 "4 ranks x batch 16": four_ranks[0]}
    runs = global_batch_curves(two_ranks_16, global_64, one_rank[1:])
    runs["two_ranks_16_train"] = two_ranks_16_train["losses"]  # train's own run of the diff's job
    runs["lr_losses"] = {name: [r["losses"] for r, (run_name, _) in zip(four_ranks, settings) if run_name == name]
                         for name in SETTINGS}
    return runs


def run_norm_jobs(epochs: int = 4, norms: tuple[str, ...] = ("batch", "sync")) -> tuple[dict, list[dict]]:
    """Lesson 05's batch-norm comparison: two jobs at the same time, each rank on one thread (for speed
    on 2 cores). One rank trains ``train(batch_size=32, norm="batch")``; two ranks train
    ``train(batch_size=16, norm=n)`` for each ``n`` in ``norms``, in one job.

    Returns rank 0's results: the 1-rank run's dict, and the 2-rank runs' dicts in the order of ``norms``."""
    from ddp_lib.workers.train import train
    from ddp_lib.workers.train_pitfalls import train_runs  # one train per dict of arguments, in one job

    norm_runs = [dict(epochs=epochs, batch_size=16, norm=n) for n in norms]
    one_rank, two_ranks = _rank0_results_at_once([(train, 1, dict(epochs=epochs, batch_size=32, norm="batch")),
                                                  (train_runs, 2, dict(runs=norm_runs))])
    return one_rank, two_ranks


def _rank0_results_at_once(jobs: list[tuple]) -> list:
    """Launch each ``(worker, nprocs, kwargs)`` job at the same time, each rank on one thread (for speed on
    2 cores: while one job's ranks wait for each other's messages, another's compute); rank 0's result of each."""
    from ddp_lib.launch import launch

    with ThreadPoolExecutor(len(jobs)) as pool:
        started = [pool.submit(launch, worker, nprocs, kwargs=kwargs, show_output=False, env={"OMP_NUM_THREADS": "1"})
                   for worker, nprocs, kwargs in jobs]
    return [job.result().results[0] for job in started]
