"""Checker for lesson 05's exercise: ``epoch_indices(rank, world_size, epochs, seed)``, the sampler's shares."""

import math
import random
from collections import Counter
from collections.abc import Callable

from ddp_lib.exercises.checking import check_on_ranks, load_worker, worker_name
from ddp_lib.exercises.solutions.lesson05 import epoch_indices
from ddp_lib.workers.shared import make_moons

# 512 samples divide by 2 (nothing read twice) but by neither 3 nor 5 (the sampler pads 1 or 3).
PADDED_WORLD_SIZES = (3, 5)
EPOCH_CHOICES = range(2, 6)  # drawn without repeats: a fixed number of epochs matches one run at most
HINTS = ((r"default process group twice",
          "the checker has joined the process group already, as a training job would before building its "
          "sampler: leave out init_process_group"),)


def _run_learner(rank: int, world_size: int, target: str, epochs: int, seed: int) -> list:
    """In each rank, inside a gloo group (as in a training job): the learner's ``epoch_indices``. So
    ``DistributedSampler(dataset, seed=seed)`` reads rank and world size from the group, as the lesson writes it."""
    from ddp_lib.process_group import process_group

    with process_group(rank, world_size):
        return load_worker(target)(rank, world_size, epochs, seed)


def diagnose(results: list, epochs: int, seed: int) -> str | None:
    """The first mistake in per-rank lists of indices per epoch, named with its fix (None: all right)."""
    world_size, n_samples = len(results), len(make_moons())
    each = math.ceil(n_samples / world_size)  # drop_last=False: the sampler pads
    padding = each * world_size - n_samples
    for rank, value in enumerate(results):
        if not isinstance(value, list) or len(value) != epochs or not all(
                isinstance(indices, list) and all(isinstance(i, int) for i in indices) for indices in value):
            return (f"rank {rank} returned {type(value).__name__} {str(value)[:60]}; expected one list of ints "
                    f"(e.g. list(sampler)) per epoch: {epochs} lists, one for each of the `epochs` it was given")
        if (short := next((epoch for epoch, indices in enumerate(value) if len(indices) != each), None)) is not None:
            return (f"rank {rank} reads {len(value[short])} samples in epoch {short}; DistributedSampler gives every "
                    f"one of {world_size} ranks {each} of the {n_samples}"
                    + (f" (it repeats {padding} so that every rank gets as many)" if padding else ""))
    for epoch in range(epochs):
        reads = Counter(i for per_epoch in results for i in per_epoch[epoch])
        if (twice := sum(reads.values()) - len(reads)) > padding:
            sample = next(i for i, n in reads.items() if n > 1)
            ranks = [r for r, per_epoch in enumerate(results) if sample in per_epoch[epoch]]
            return (f"epoch {epoch}: ranks {ranks[0]} and {ranks[1]} both read sample {sample}"
                    + (f" ({twice} repeats where padding makes {padding})" if padding else "")
                    + "; use the same seed on every rank, so that the ranks split one permutation (and, if you "
                      "pass them, num_replicas=world_size and rank=rank)")
    # The solution's orders, one epoch more: set_epoch(epoch + 1) gives the next epoch's.
    reference = [epoch_indices(rank, world_size, epochs + 1, seed) for rank in range(world_size)]
    for rank, per_epoch in enumerate(results):
        if same := next((epoch for epoch in range(1, epochs) if per_epoch[epoch] == per_epoch[epoch - 1]), None):
            return (f"rank {rank} reads the same order in epoch {same} as in epoch {same - 1}; "
                    "call sampler.set_epoch(epoch) at the start of every epoch")
        if per_epoch[:epochs] == reference[rank][1:]:
            return (f"rank {rank}'s order in epoch 0 is DistributedSampler's for epoch 1: epochs count from 0; call "
                    "sampler.set_epoch(epoch) with epoch from range(epochs)")
        for epoch, (got, expected) in enumerate(zip(per_epoch, reference[rank])):
            if got != expected:
                at = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
                return (f"rank {rank}'s order in epoch {epoch} is not DistributedSampler's for seed {seed} (first "
                        f"difference at {at}): keep shuffle=True, pass seed=seed, call sampler.set_epoch(epoch)")
    return None


def check_epoch_indices(fn: Callable, plan: list[tuple[int, int]] | None = None, seed: int | None = None):
    """A report on ``fn(rank, world_size, epochs, seed)`` per (world_size, epochs) of ``plan``; unset ones drawn now."""
    seed = random.randint(1, 9999) if seed is None else seed
    epochs = dict(plan or zip((2, random.choice(PADDED_WORLD_SIZES)), random.sample(EPOCH_CHOICES, 2)))
    return check_on_ranks(_run_learner, tuple(epochs), lambda runs: diagnose(runs, epochs[len(runs)], seed),
                          lambda world_size: (worker_name(fn), epochs[world_size], seed), stop=True, timeout=120,
                          hints=HINTS,
                          where=lambda runs: f"world_size {len(runs)}, {epochs[len(runs)]} epochs",
                          passed=f"with seed {seed}, in every epoch every rank reads DistributedSampler's share for "
                          "that seed and epoch")


# Exercise 2: predict whether a resume on 4 ranks continues the 2-rank run, then let the checker run it.
RESUMES = {"matches_4x8": (4, 8), "matches_4x16": (4, 16)}  # prediction's name -> (world size, batch per rank)
SAME = 1e-5  # a parameter difference below this is float rounding: the same run
WHY = {True: "the global batch is still 32, and the sampler's permutation depends on seed + epoch only, so each "
             "step reads the same 32 samples; only the order of float additions changes",
       False: "the global batch becomes 64: half the steps per epoch, with the same learning rate"}


def judge_resume(predictions: dict[str, object], differences: dict[str, float]) -> list[str]:
    """PASS/FAIL lines: each prediction (a bool) against the measured largest parameter difference."""
    lines = []
    for name, (world_size, batch) in RESUMES.items():
        predicted, diff = predictions[name], differences[name]
        same = diff < SAME
        said = f"{world_size} ranks x {batch}: max parameter difference {diff:.2g} from the uninterrupted run"
        if predicted is same:
            lines.append(f"PASS {said}; you predicted {'the same' if same else 'a different'} run: {WHY[same]}")
        else:
            lines.append(f"FAIL {said}; you predicted {'the same' if predicted else 'a different'} run, but it is "
                         f"{'the same' if same else 'different'}: {WHY[same]}")
    return lines


def check_resume_prediction(matches_4x8: bool, matches_4x16: bool, epochs: int = 8, fail_at_epoch: int = 5):
    """Exercise 2: crash a 2 x 16 run at ``fail_at_epoch``, resume it on 4 x 8 and on 4 x 16, and compare each
    final model with the uninterrupted 2 x 16 run; report on the two predictions (True: the same run)."""
    import tempfile

    import torch

    from ddp_lib.demos.training_runs import train_with_switches
    from ddp_lib.errors import WorkerError
    from ddp_lib.exercises.checking import Report
    from ddp_lib.launch import run_ranks

    predictions = {"matches_4x8": matches_4x8, "matches_4x16": matches_4x16}
    for name, value in predictions.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r}: pass True (the resumed run ends with the same parameters) or False")
    quiet = dict(show_output=False, env={"OMP_NUM_THREADS": "1"})
    straight = run_ranks(train_with_switches, 2, kwargs=dict(epochs=epochs, batch_size=16), **quiet)[0]["params"]
    differences = {}
    for name, (world_size, batch) in RESUMES.items():
        with tempfile.TemporaryDirectory(prefix="lesson05-resume-") as folder:
            try:
                run_ranks(train_with_switches, 2, kwargs=dict(epochs=epochs, batch_size=16, checkpoint_dir=folder,
                                                              fail_at_epoch=fail_at_epoch), **quiet)
            except WorkerError:
                pass  # the crash on purpose
            resumed = run_ranks(train_with_switches, world_size, kwargs=dict(
                epochs=epochs, batch_size=batch, checkpoint_dir=folder, resume=True), **quiet)[0]["params"]
        differences[name] = (torch.tensor(resumed) - torch.tensor(straight)).abs().max().item()
    return Report(judge_resume(predictions, differences))


# Exercise 3: whose data the running statistics in the final checkpoint describe, with norm="batch" (DDP's
# default, then forward_sync_buffers=False) and norm="sync". The exercise offers "rank 0" and "all ranks";
# "each rank" is read too, and judged with its reason.
WHOSE = {  # an answer, written any of these ways (lower case, without a trailing "'s data"), -> its meaning
    "rank 0": ("rank 0", "rank0", "rank 0 only", "rank 0's", "0"),
    "all ranks": ("all ranks", "all", "every rank", "all ranks'", "the global batch", "global", "all the data"),
    "each rank": ("each rank", "each rank its own", "its own rank", "own", "the saving rank's own"),
}
BATCHNORM_ANSWERS = {"batch": "rank 0", "batch_without_sync": "rank 0", "sync": "all ranks"}
BATCHNORM_LABELS = {"batch": 'norm="batch"', "batch_without_sync": 'norm="batch", forward_sync_buffers=False',
                    "sync": 'norm="sync"'}
BATCHNORM_WHY = {
    ("batch", "rank 0"): "at the start of a forward DDP copies rank 0's buffers to every rank, so rank 0's are never "
                         "overwritten and only ever see rank 0's batches; rank 0 saves the checkpoint",
    ("batch", "all ranks"): "DDP averages gradients, not buffers: it broadcasts rank 0's buffers, so the "
                            "checkpoint holds rank 0's statistics. Averaging the buffers over the ranks would "
                            "not fix it: under forward_sync_buffers=False it gives all ranks' running mean, but the "
                            "averaged running variance leaves out the spread between the ranks' means. For both, "
                            "use norm=\"sync\"",
    ("batch", "each rank"): "only rank 0 saves, and the other ranks' updates are overwritten by rank 0's buffers "
                            "at their next forward: the checkpoint describes rank 0's data",
    ("batch_without_sync", "rank 0"): "without the copy each rank's statistics follow its own batches, and rank 0 "
                                      "saves its own: the checkpoint describes rank 0's data. Averaging the buffers "
                                      "over the ranks gives all ranks' running mean, not their variance: use "
                                      "norm=\"sync\"",
    ("batch_without_sync", "all ranks"): "turning the copy off averages nothing: each rank's statistics follow its own "
                                         "batches, and rank 0 saves its own. Averaging the buffers would give all "
                                         "ranks' running mean, but not their variance",
    ("batch_without_sync", "each rank"): "each rank's statistics now follow its own batches, but only rank 0 saves: "
                                         "the checkpoint describes rank 0's data",
    ("sync", "all ranks"): "each forward normalises with the mean and variance of the global batch and updates the "
                           "running statistics from them, so they are equal on every rank and describe all ranks' data",
    ("sync", "rank 0"): "DDP still broadcasts rank 0's buffers, but with norm=\"sync\" every rank's running "
                        "statistics come from the global batch: rank 0's describe all ranks' data",
    ("sync", "each rank"): "with norm=\"sync\" no rank keeps statistics of its own batches: each forward uses the "
                           "global batch's mean and variance, the same on every rank",
}


def read_whose(name: str, value: object) -> str:
    """The meaning of one answer (a key of WHOSE), however it is written; one clear line if it is none."""
    text = " ".join(str(value).lower().split()) if isinstance(value, str) else None
    for ending in ("'s data", " data", "’s data"):
        if text and text.endswith(ending):
            text = text[:-len(ending)].strip()
    for meaning, spellings in WHOSE.items():
        if text in spellings:
            return meaning
    raise ValueError(f"{name}={value!r}: pass 'rank 0' or 'all ranks'")


def check_batchnorm_prediction(batch: str, batch_without_sync: str, sync: str):
    """Exercise 3: judge whose data the checkpoint's running statistics describe, for norm="batch" under DDP's
    default, for norm="batch" with forward_sync_buffers=False, and for norm="sync"."""
    from ddp_lib.exercises.checking import Report

    answers = {"batch": read_whose("batch", batch),
               "batch_without_sync": read_whose("batch_without_sync", batch_without_sync),
               "sync": read_whose("sync", sync)}
    report = Report()
    for case, said in answers.items():
        right = BATCHNORM_ANSWERS[case]
        whose = right + ("'" if right.endswith("s") else "'s")  # "rank 0's", "all ranks'"
        if said == right:
            report.ok(f"{BATCHNORM_LABELS[case]}: {whose} data: {BATCHNORM_WHY[case, said]}")
        else:
            report.fail(f"{BATCHNORM_LABELS[case]}: you said {said}, but it is {whose} data: "
                        f"{BATCHNORM_WHY[case, said]}")
    return report


# Exercise 5: the metric split, each evaluation sample on exactly one rank.
# 201 on 2 ranks and 10 on 4 do not divide; 3 samples on 5 ranks leave two ranks with none.
METRIC_CASES = ((2, 201), (4, 10), (3, 512), (5, 3), (1, 7))


def read_shard(value: object, n: int) -> list[int] | str:
    """One rank's answer as a list of ints in range(n), or one line saying why it is not."""
    try:
        indices = [int(i) for i in value]  # a list, a range or a 1-D tensor of ints
    except (TypeError, ValueError):
        return f"returned {type(value).__name__} {str(value)[:60]}; expected a list (or range) of sample indices"
    if (bad := next((i for i in indices if not 0 <= i < n), None)) is not None:
        return f"returned index {bad}, but the {n} samples are numbered 0 to {n - 1}"
    return indices


def check_metric_split(fn: Callable):
    """Exercise 5: ``fn(rank, world_size, n)`` gives the evaluation samples of one rank; together, each once."""
    from ddp_lib.exercises.checking import Report

    report = Report()
    for world_size, n in METRIC_CASES:
        where = f"world_size {world_size}, {n} samples"
        shards = []
        for rank in range(world_size):
            try:
                shard = read_shard(fn(rank, world_size, n), n)
            except Exception as e:  # the learner's code: report it, do not stop
                shard = f"raised {type(e).__name__}: {e}"
            if isinstance(shard, str):
                report.fail(f"{where}: rank {rank} {shard}")
                return report
            shards.append(shard)
        reads = Counter(i for shard in shards for i in shard)
        if world_size > 1 and all(len(shard) == n for shard in shards):
            report.fail(f"{where}: every rank reads all {n} samples, so the all-reduce counts each "
                        f"{world_size} times. Split by rank: range(rank, n, world_size)")
            return report
        if twice := sorted(i for i, count in reads.items() if count > 1):
            readers = [r for r, shard in enumerate(shards) if twice[0] in shard]
            who = f"rank {readers[0]} reads it twice" if len(readers) == 1 else f"ranks {readers} read it"
            report.fail(f"{where}: sample {twice[0]} counts twice ({who}; {len(twice)} sample(s) in all). "
                        "DistributedSampler pads this way. Give rank r the samples r, r + world_size, ...: "
                        "range(rank, n, world_size)")
            return report
        if missing := sorted(set(range(n)) - set(reads)):
            report.fail(f"{where}: {len(missing)} sample(s) read by no rank; the first is sample {missing[0]}. "
                        "n // world_size samples per rank, or drop_last=True, drops the remainder. "
                        "Give rank r the samples range(rank, n, world_size)")
            return report
        report.ok(f"{where}: each sample on exactly one rank (ranks read {[len(s) for s in shards]})")
    return report
