"""ddp_lib.demos.batch_scaling: the numbers lesson 05 quotes from its batch-size and learning-rate runs."""

import pytest
import torch

from ddp_lib.demos.batch_scaling import (
    FOUR_RANKS,
    ONE_RANK,
    SEEDS,
    global_batch_curves,
    lr_scaling_report,
    run_norm_jobs,
    run_scaling_jobs,
    summarize_lr_scaling,
)
from ddp_lib.launch import run_ranks
from ddp_lib.workers.train import train
from ddp_lib.workers.train_pitfalls import train_runs


def test_summary_by_hand():
    one_rank = [[0.5, 0.10], [0.5, 0.20]]
    losses = {"lr 0.1": [[0.6, 0.30], [0.6, 0.40]], "lr 0.4": [[0.4, 0.105], [0.4, 0.25]]}
    s = summarize_lr_scaling(losses, one_rank)
    assert s["closer_every_seed"] is True
    assert s["gaps"]["lr 0.1"] == pytest.approx(0.2)
    assert s["gaps"]["lr 0.4"] == pytest.approx(0.0275)
    assert s["closed"] == pytest.approx(1 - 0.0275 / 0.2)
    assert s["near"] == 1  # 0.105 is within 10% of 0.10; 0.25 is not within 10% of 0.20
    assert s["epoch_means"]["lr 0.4"] == pytest.approx([0.4, 0.1775])
    assert set(s["means"]) == {ONE_RANK, FOUR_RANKS["lr 0.1"], FOUR_RANKS["lr 0.4"]}  # no warm-up runs given
    assert "warmup_lower_early" not in s
    low, high = s["ranges"][ONE_RANK]
    assert low == pytest.approx([0.5, 0.10]) and high == pytest.approx([0.5, 0.20])
    assert s["seeds"] == 2


def test_report_prints_means_ranges_and_epochs_2_and_3():
    one_rank = [[0.5, 0.3, 0.10], [0.5, 0.3, 0.20]]
    losses = {"lr 0.1": [[0.6, 0.5, 0.30], [0.6, 0.5, 0.40]], "lr 0.4": [[0.4, 0.2, 0.105], [0.4, 0.4, 0.25]]}
    assert lr_scaling_report(summarize_lr_scaling(losses, one_rank)).splitlines() == [
        "1 rank, lr 0.1:  mean final loss 0.150 (2 seeds: 0.100 to 0.200)",
        "4 ranks, lr 0.1: mean final loss 0.350 (2 seeds: 0.300 to 0.400)",
        "4 ranks, lr 0.4: mean final loss 0.177 (2 seeds: 0.105 to 0.250)",
        "lr 0.4 ends closer to 1 rank than lr 0.1 on every seed: True",
        "mean loss after epochs 2 and 3: lr 0.1 0.500, 0.350; lr 0.4 0.300, 0.177",
    ]


def test_summary_and_report_with_the_warm_up_runs():
    one_rank = [[0.5, 0.3, 0.2, 0.10]]
    losses = {"lr 0.1": [[0.6, 0.5, 0.4, 0.30]], "lr 0.4": [[0.4, 0.45, 0.4, 0.105]],
              "lr 0.4, warm-up": [[0.5, 0.40, 0.3, 0.11]]}
    s = summarize_lr_scaling(losses, one_rank)
    assert s["warmup_lower_early"] is True
    assert s["closer_every_seed"] is True and s["gaps"]["lr 0.4"] == pytest.approx(0.005)
    assert set(s["means"]) == {ONE_RANK, *FOUR_RANKS.values()}
    lines = lr_scaling_report(s).splitlines()
    assert lines[0] == "1 rank, lr 0.1:           mean final loss 0.100 (1 seeds: 0.100 to 0.100)"
    assert lines[3] == "4 ranks, lr 0.4, warm-up: mean final loss 0.110 (1 seeds: 0.110 to 0.110)"
    assert lines[-1] == ("mean loss after epochs 2 and 3: lr 0.1 0.500, 0.400; lr 0.4 0.450, 0.400; "
                         "lr 0.4, warm-up 0.400, 0.300")
    losses["lr 0.4, warm-up"] = [[0.5, 0.40, 0.5, 0.11]]  # higher after epoch 3
    assert summarize_lr_scaling(losses, one_rank)["warmup_lower_early"] is False


def test_summary_when_the_scaled_rate_is_not_closer():
    one_rank = [[0.1], [0.1]]
    s = summarize_lr_scaling({"lr 0.1": [[0.2], [0.12]], "lr 0.4": [[0.15], [0.3]]}, one_rank)
    assert s["closer_every_seed"] is False
    assert s["near"] == 0


def _largest_gaps(runs: dict) -> tuple[float, float]:
    """As lesson 05's cell computes them: the largest loss and final-parameter gaps of the 2- and
    4-rank global-batch-64 runs from the 1-rank run."""
    curves = list(runs["global_64"].values())
    params = [torch.tensor(p) for p in runs["global_64_params"].values()]
    return (max(abs(a - b) for c in curves[1:] for a, b in zip(curves[0], c)),
            max((p - params[0]).abs().max().item() for p in params[1:]))


def test_same_global_batch_runs_agree():
    # Lesson 05's three jobs, one epoch: one job per world size; the 1-rank one also trains batch 16 per seed,
    # and the 4-rank one the learning-rate runs, seed 0 at lr 0.1 first.
    two_ranks = run_ranks(train, 2, kwargs=dict(epochs=1, batch_size=16, lr=0.1), show_output=False)[0]
    one_thread = dict(show_output=False, env={"OMP_NUM_THREADS": "1"})
    one_rank = run_ranks(train_runs, 1, kwargs=dict(runs=[dict(epochs=1, batch_size=64, lr=0.1)] + [
        dict(epochs=1, batch_size=16, lr=0.1, seed=s) for s in SEEDS]), **one_thread)[0]
    four_ranks = run_ranks(train_runs, 4, kwargs=dict(runs=[dict(epochs=1, batch_size=16, lr=lr, seed=s)
                                                            for s in SEEDS for lr in (0.1, 0.4)]), **one_thread)[0]
    two_ranks_32 = run_ranks(train, 2, kwargs=dict(epochs=1, batch_size=32, lr=0.1), **one_thread)[0]
    global_64 = {"1 rank x batch 64": one_rank[0], "2 ranks x batch 32": two_ranks_32,
                 "4 ranks x batch 16": four_ranks[0]}
    runs = global_batch_curves(two_ranks["losses"], global_64, one_rank[1:])
    assert max(_largest_gaps(runs)) < 1e-5
    assert len(runs["global_64"]) == 3 and len(runs["per_rank_16"]) == 3
    assert runs["per_rank_16"]["2 ranks, global batch 32"] == two_ranks["losses"]
    assert runs["per_rank_16"]["1 rank, global batch 16"] == one_rank[1]["losses"]  # seed 0
    assert len(runs["one_rank_losses"]) == len(SEEDS) and all(len(c) == 1 for c in runs["one_rank_losses"])
    # the 4-rank job's seed-0 run at lr 0.1 is the same training as a plain train() call
    alone = run_ranks(train, 4, kwargs=dict(epochs=1, batch_size=16, lr=0.1), **one_thread)[0]
    assert alone["params"] == four_ranks[0]["params"]


def test_run_scaling_jobs_prints_one_line_per_job_and_returns_the_lr_runs(capsys):
    # The lesson's cell: the three jobs in one call, one epoch each.
    two_ranks = run_ranks(train, 2, kwargs=dict(epochs=1, batch_size=16, lr=0.1), show_output=False)[0]
    runs = run_scaling_jobs(two_ranks["losses"], epochs=1)
    assert capsys.readouterr().out.splitlines() == [
        "1 rank ...",
        "2 ranks ...",
        "4 ranks ...",
    ]
    assert max(_largest_gaps(runs)) < 1e-5
    assert runs["per_rank_16"]["2 ranks, global batch 32"] == two_ranks["losses"]
    assert runs["two_ranks_16_train"] == pytest.approx(two_ranks["losses"], abs=1e-6)  # train's own run of the job
    assert set(runs["lr_losses"]) == {"lr 0.1", "lr 0.4", "lr 0.4, warm-up"}
    assert all(len(curves) == len(SEEDS) and all(len(c) == 1 for c in curves) for curves in runs["lr_losses"].values())
    assert runs["lr_losses"]["lr 0.1"][0] == runs["global_64"]["4 ranks x batch 16"]  # seed 0 at lr 0.1
    summary = summarize_lr_scaling(runs["lr_losses"], runs["one_rank_losses"])
    assert summary["seeds"] == len(SEEDS) and "warmup_lower_early" not in summary  # 1 epoch: no epochs 2 and 3
    assert runs["lr_losses"]["lr 0.4, warm-up"] != runs["lr_losses"]["lr 0.4"]  # the warm-up changed the first epoch


def test_global_batch_curves_hands_each_runs_parameters_to_the_cells_comparison():
    # a 4-rank seed-0 run that is not the same training: the cell's parameter gap shows it, the loss gap not
    base = {"losses": [0.5], "params": [1.0, 2.0]}
    runs = global_batch_curves([0.5], {"a": base, "b": base, "c": {"losses": [0.5], "params": [1.0, 2.5]}},
                               [{"losses": [0.4]}])
    assert runs["global_64_params"] == {"a": [1.0, 2.0], "b": [1.0, 2.0], "c": [1.0, 2.5]}
    assert _largest_gaps(runs) == (0.0, 0.5)
    assert runs["one_rank_losses"] == [[0.4]]


def test_synchronised_batch_norm_matches_one_rank_and_per_rank_does_not():
    # Lesson 05's batch-norm cell, as it runs it: 2 ranks x 16 against 1 rank x 32, two jobs at once.
    one_rank, two_ranks = run_norm_jobs(epochs=2)
    assert len(two_ranks) == 2 and len(one_rank["losses"]) == len(two_ranks[0]["losses"]) == 2
    runs = {norm: {"difference": (torch.tensor(run["params"]) - torch.tensor(one_rank["params"])).abs().max().item()}
            for norm, run in zip(("batch", "sync"), two_ranks)}
    assert runs["sync"]["difference"] < 1e-4
    assert runs["batch"]["difference"] > 1e-2


def test_train_warmup_steps_changes_the_first_epoch():
    warmed, plain = run_ranks(train_runs, 2, kwargs=dict(runs=[dict(epochs=1, batch_size=16, lr=0.4, warmup_steps=w)
                                                                for w in (8, 0)]), show_output=False)[0]
    assert len(warmed["losses"]) == len(plain["losses"]) == 1
    assert abs(warmed["losses"][0] - plain["losses"][0]) > 1e-3
