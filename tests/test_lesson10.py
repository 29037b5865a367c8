"""Lesson 10's workers and exercise checker, run on real gloo ranks."""

import inspect
import re

import pytest
from answer_files import notebook_stub

from ddp_lib.demos.fsdp_rank0_eval import rank0_evaluation
from ddp_lib.errors import WorkerError
from ddp_lib.exercises import lesson10
from ddp_lib.exercises.solutions import lesson10 as solutions
from ddp_lib.launch import run_ranks
from ddp_lib.workers.beyond_ddp import (
    bytes_sent,
    compare_strategies,
    fsdp_checkpoint,
    fsdp_extras,
    hsdp_step,
    memory_run,
    mesh_2x2,
    seeded_by_rank,
    zero_prediction,
)


@pytest.fixture(scope="module")
def runs() -> dict:
    return {s: run_ranks(memory_run, 2, kwargs=dict(strategy=s, width=64, layers=2), show_output=False)
            for s in ("ddp", "zero1", "fsdp", "fsdp_no_reshard")}


def test_compare_strategies_runs_each_in_one_job():
    ranks = run_ranks(compare_strategies, 2, kwargs=dict(strategies="ddp,zero1_view,fsdp", steps=2), show_output=False)
    assert list(ranks[0]) == ["ddp", "zero1_view", "fsdp"]
    assert max(abs(a - b) for a, b in zip(ranks[0]["ddp"]["losses"], ranks[1]["fsdp"]["losses"])) < 1e-5
    assert ranks[1]["fsdp"]["local_shape"] == [128, 256]
    # ZeRO-1 with gradient_as_bucket_view: the state halved, and the gradients are DDP's bucket.
    for r in ranks:
        view, ddp = r["zero1_view"], r["ddp"]
        assert 0.4 < view["bytes"]["optimizer state"] / ddp["bytes"]["optimizer state"] < 0.6
        assert view["layout"]["gradients_inside_buckets"] and not ddp["layout"]["gradients_inside_buckets"]
        # parameters_as_bucket_view=True: one broadcast per rank, not one per parameter tensor.
        assert [kind for kind, _ in view["payloads"]].count("broadcast") == 2


def test_each_run_in_one_job_walks_its_own_live_tensors():
    # memory_run freezes what is alive before it starts, so that its walk and Python's collections skip
    # torch's own objects: a later run in the same process must still find every tensor it made.
    ranks = run_ranks(compare_strategies, 2, kwargs=dict(strategies="ddp,fsdp,fsdp_no_reshard", steps=2,
                                                         timed_steps=0), show_output=False)
    for r in ranks:
        for strategy in ("fsdp", "fsdp_no_reshard"):
            run = r[strategy]
            counted = sum(run["bytes"][part] for part in ("parameters", "gradients", "optimizer state"))
            assert abs(run["measured"]["live tensors"] - counted) < 5e3, (strategy, r[strategy]["rank"])


def test_fully_shard_on_the_root_alone_keeps_every_gathered_weight_from_forward_to_backward():
    # one unit for the whole model: the root reshards after backward only, as fsdp_no_reshard's units do
    ranks = run_ranks(compare_strategies, 2, kwargs=dict(strategies="fsdp,fsdp_no_reshard,fsdp_root_only", steps=1,
                                                         timed_steps=0), show_output=False)
    for r in ranks:
        held = {s: r[s]["bytes"]["activations"] for s in ("fsdp", "fsdp_no_reshard", "fsdp_root_only")}
        assert held["fsdp_root_only"] == held["fsdp_no_reshard"] > held["fsdp"] + 1_000_000, held
        assert r["fsdp_root_only"]["local_shape"] == [128, 256]  # still sharded between steps


def test_the_strategies_train_to_the_same_losses(runs):
    ddp = runs["ddp"][0]["losses"]
    for strategy in ("zero1", "fsdp"):
        assert max(abs(a - b) for a, b in zip(ddp, runs[strategy][0]["losses"])) < 1e-5


def test_zero1_halves_the_optimizer_state_and_fsdp_everything(runs):
    ddp = runs["ddp"][0]["bytes"]
    for rank in range(2):
        zero1, fsdp = runs["zero1"][rank]["bytes"], runs["fsdp"][rank]["bytes"]
        assert zero1["parameters"] == ddp["parameters"] and zero1["gradients"] == ddp["gradients"]
        assert 0.4 < zero1["optimizer state"] / ddp["optimizer state"] < 0.6
        for part in ("parameters", "gradients", "optimizer state"):
            assert 0.4 < fsdp[part] / ddp[part] < 0.6


def _counted(r: dict) -> int:
    return sum(r["bytes"][part] for part in ("parameters", "gradients", "optimizer state"))


def test_the_zero_formula_predicts_the_counted_parts(runs):
    for strategy, stage in (("ddp", 0), ("zero1", 1), ("fsdp", 3), ("fsdp_no_reshard", 3)):
        for r in runs[strategy]:
            predicted = zero_prediction(r["n_params"], 2, stage)
            assert abs(_counted(r) - predicted) < 0.05 * predicted, (strategy, r["rank"])


def test_ddps_bucket_copy_and_fsdps_gathered_weights(runs):
    ddp = runs["ddp"][0]
    # The bucket copy, found by address: the gradients lie outside DDP's bucket, which is as large as them.
    assert not ddp["layout"]["gradients_inside_buckets"]
    assert ddp["layout"]["bucket_bytes"] == ddp["bytes"]["gradients"]
    assert ddp["measured"]["peak"] >= ddp["measured"]["between steps"]
    fsdp, kept = runs["fsdp"][0], runs["fsdp_no_reshard"][0]
    # Counted at the forward's end, by storage object: FSDP2 freed the gathered weights its saved tensors
    # point at, so it keeps what DDP keeps; measured, the same...
    assert fsdp["bytes"]["activations"] == ddp["bytes"]["activations"]
    assert abs(fsdp["measured"]["forward"] - ddp["measured"]["forward"]) < 0.2 * ddp["measured"]["forward"]
    # ...and without resharding it keeps every layer's full weights until backward.
    assert kept["measured"]["forward"] - fsdp["measured"]["forward"] > 0.9 * ddp["bytes"]["parameters"]
    assert kept["collectives"]["c10d::_allgather_base_"] == kept["collectives"]["c10d::_reduce_scatter_base_"]
    assert runs["fsdp"][0]["head_local_shape"] == [1, 64] and runs["fsdp"][1]["head_local_shape"] == [0, 64]


def test_hsdp_reduce_scatters_over_shard_and_all_reduces_over_replicate():
    ranks = run_ranks(hsdp_step, 4, show_output=False)
    for r in ranks:
        assert r["collectives"] == {"c10d::_allgather_base_": 4, "c10d::_reduce_scatter_base_": 2,
                                    "c10d::allreduce_": 2,  # what torch asked for; what gloo ran:
                                    "gloo:all_gather": 4, "gloo:all_reduce": 4}
        assert r["global_batch_gap"] < 1e-6
        # each collective in the group its kind belongs to: gathers and reduce-scatters within the shard group
        assert r["groups"] == {"all_gather": [r["shard_group"]], "reduce_scatter": [r["shard_group"]],
                               "all_reduce": [r["replicate_group"]]}
    assert [r["shard_group"] for r in ranks] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["replicate_group"] for r in ranks] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [r["local_shapes"][2] for r in ranks] == [[1, 8], [0, 8], [1, 8], [0, 8]]


def test_fsdp_extras_clip_mixed_precision_and_checkpointing():
    r = run_ranks(fsdp_extras, 2, show_output=False)[0]  # checkpointing pays off only with a few wide layers
    assert r["clip"]["ddp_norm"] == r["clip"]["fsdp_norm"] and r["clip"]["max_grad_diff"] < 1e-6
    assert r["clip"]["norm_placements"] == ["Replicate()"]  # combined across ranks inside clip_grad_norm_
    assert r["mixed"]["compute_dtype"] == "bfloat16" and r["mixed"]["grad_dtype"] == "float32"
    assert r["mixed"]["output_dtype"] == "bfloat16"  # no output_dtype in the policy: the output stays bfloat16
    assert 1e-3 < r["mixed"]["output_rel_err"] < 0.01 and 1e-3 < r["mixed"]["grad_rel_err"] < 0.1  # rounded, not lost
    assert r["checkpointing"]["forward_bytes_checkpointed"] < r["checkpointing"]["forward_bytes"]
    assert r["checkpointing"]["max_grad_diff"] == 0
    # Each block checkpointed, then sharded: DDP's gradients, and the recompute gathers nothing more
    # (FSDP2's pre-backward hook has gathered the block's weights before the recompute needs them).
    assert r["checkpointing"]["sharded_grad_diff"] < 1e-6
    gathers = r["checkpointing"]["all_gathers"]
    assert gathers["sharded"] == gathers["sharded_checkpointed"] == 9  # 5 units in forward, 4 again in backward
    # An optimizer created before fully_shard holds the replaced parameters: its step changes nothing.
    assert r["order"] == {"optimizer_holds_model_params": False, "model_params_held": 0, "model_params": 10,
                          "model_changed": False}


def test_each_strategy_runs_its_own_collectives(runs):
    assert set(runs["ddp"][0]["collectives"]) == {"c10d::allreduce_", "gloo:all_reduce"}
    assert runs["zero1"][0]["collectives"]["c10d::broadcast_"] > 0
    fsdp = runs["fsdp"][0]["collectives"]
    assert fsdp["c10d::_allgather_base_"] == 2 * fsdp["c10d::_reduce_scatter_base_"] == 6  # 3 Linear units
    assert runs["fsdp"][0]["placements"] == ["S(0)"]
    assert runs["fsdp"][0]["local_shape"] == [32, 64] and runs["fsdp"][0]["global_shape"] == [64, 64]


def test_fsdp_checkpoint_resumes_to_the_same_result(tmp_path):
    straight = run_ranks(fsdp_checkpoint, 2, kwargs=dict(steps=4, width=64), show_output=False)[0]
    first = run_ranks(fsdp_checkpoint, 2, kwargs=dict(steps=4, save_at=2, checkpoint_dir=str(tmp_path), width=64),
                      show_output=False)[0]  # saving does not change the run
    resumed = run_ranks(fsdp_checkpoint, 2, kwargs=dict(steps=4, save_at=2, checkpoint_dir=str(tmp_path), resume=True,
                                                    width=64), show_output=False)[0]
    assert first["losses"] == straight["losses"]
    assert resumed["start_step"] == 2 and resumed["losses"] == straight["losses"][2:]
    assert resumed["checksum"] == straight["checksum"]


def test_a_2_rank_checkpoint_loads_on_4_ranks_with_the_same_parameters(tmp_path):
    ckpt = dict(save_at=2, checkpoint_dir=str(tmp_path), width=64)
    saved = run_ranks(fsdp_checkpoint, 2, kwargs=dict(steps=2, **ckpt), show_output=False)[0]["checksum"]
    loaded = {n: run_ranks(fsdp_checkpoint, n, kwargs=dict(steps=2, resume=True, **ckpt), show_output=False)
              for n in (2, 4)}  # steps=2 after save_at=2: load, train none
    assert {r["checksum"] for r in loaded[2] + loaded[4]} == {saved}
    assert all(r["start_step"] == 2 and r["losses"] == [] for r in loaded[4])


def test_fsdp2_keeps_each_ranks_own_initial_rows_where_ddp_broadcasts_rank_0s():
    for r in run_ranks(seeded_by_rank, 4, show_output=False):
        assert r["ddp"] == {"same_on_every_rank": True, "rank0s_weights": True}
        assert r["fsdp"] == {"same_on_every_rank": True, "rank0s_weights": False} and r["own_rows"]
        assert r["own_rows_sums"][0] == r["own_rows_sums"][1]
        assert r["hsdp"] == {"same_on_every_rank": False, "rank0s_weights": False}


def test_mesh_2x2_groups():
    ranks = run_ranks(mesh_2x2, 4, show_output=False)
    assert [r["coordinate"] for r in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r["replicate_group"] for r in ranks] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [r["shard_group"] for r in ranks] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["sum_over_replicate"] for r in ranks] == [2.0, 4.0, 2.0, 4.0]
    assert ranks[0]["placements"] == ["R", "S(0)"]


def test_mesh_2x2_refuses_other_world_sizes():
    from ddp_lib.errors import WorkerError

    with pytest.raises(WorkerError, match="needs world_size 4"):
        run_ranks(mesh_2x2, 2, show_output=False)


# Bytes of Adam state on rank 0 for the lesson's model after one step (exp_avg, exp_avg_sq and a step
# per tensor), worked out by hand from how each strategy splits the ten parameter tensors.
PREDICTED_ON_3 = {"ddp": 8 * 263_425 + 4 * 10,  # everything
                  "zero1": 8 * 2 * 65_536 + 4 * 2,  # largest first, each to the emptiest rank: two weights
                  "fsdp": 8 * (4 * 86 * 256 + 4 * 86 + 256 + 1) + 4 * 10}  # torch.chunk: 86 of 256 rows, the head
PREDICTED_ON_2 = {"ddp": 8 * 263_425 + 4 * 10, "zero1": 8 * (2 * 65_536 + 3 * 256) + 4 * 5,
                  "fsdp": 8 * (4 * 128 * 256 + 4 * 128 + 256 + 1) + 4 * 10}


def _check(tmp_path, monkeypatch, name: str, source: str, predicted: dict | None = PREDICTED_ON_3, **options):
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    return lesson10.check_state_bytes(module.state_bytes, predicted, **options)


def _solution_as_written(tmp_path, monkeypatch, **kwargs):
    """The worked solution's source in a module of the learner's own, as the lesson's cell writes it."""
    return _check(tmp_path, monkeypatch, "copied_solution10", inspect.getsource(solutions), **kwargs)


def test_checker_passes_the_solution_and_the_worked_predictions(tmp_path, monkeypatch):
    report = _solution_as_written(tmp_path, monkeypatch)
    assert report.passed, str(report)
    assert "zero1: you predicted 1,048,584 bytes on rank 0, it holds 1,048,584" in str(report)


def test_checker_fails_the_zero_formula_for_zero1_on_3_ranks(tmp_path, monkeypatch):
    # The formula splits the state evenly; ZeroRedundancyOptimizer splits whole tensors.
    formula = {s: zero_prediction(263_425, 3, stage, bytes_per_param=(0, 0, 8))
               for s, stage in (("ddp", 0), ("zero1", 1), ("fsdp", 3))}
    report = str(_solution_as_written(tmp_path, monkeypatch, predicted=formula))
    assert "PASS ddp" in report and "PASS fsdp" in report and "FAIL zero1: you predicted" in report


def test_checker_fails_the_stub_and_names_zero_and_dtensor_without_giving_the_bytes(tmp_path, monkeypatch):
    stub = notebook_stub("10_beyond_ddp.ipynb", "my_work/lesson10_state_bytes.py")
    report = str(_check(tmp_path, monkeypatch, "stub10", stub, predicted=None))
    assert report.startswith("FAIL predicted must give an int")
    assert ".optim" in report and ".to_local()" in report and "FAIL ddp" not in report
    assert "not what this rank holds" in report and not re.search(r"holds \d", report)




WRONG_COUNTS = {
    # 8 bytes per element and a 4-byte step per parameter: exact after a plain Adam step.
    "sizes10": """\
def state_bytes(optimizer):
    inner = getattr(optimizer, "optim", optimizer)
    params = [p for group in inner.param_groups for p in group["params"]]
    return sum(8 * getattr(p, "_local_tensor", p).numel() + 4 for p in params)
""",
    # The global DTensor state divided by a hard-coded world size of 2.
    "world10": """\
import torch


def state_bytes(optimizer):
    inner = getattr(optimizer, "optim", optimizer)
    tensors = [t for s in inner.state.values() for t in s.values() if torch.is_tensor(t)]
    full = sum(t.numel() * t.element_size() for t in tensors)
    return full // 2 if any(hasattr(t, "to_local") for t in tensors) else full
""",
}


@pytest.mark.parametrize("name", sorted(WRONG_COUNTS))
def test_checker_refuses_counts_not_made_from_the_state(name, tmp_path, monkeypatch):
    report = _check(tmp_path, monkeypatch, name, WRONG_COUNTS[name])
    assert not report.passed, str(report)
    if name == "sizes10":  # right after the lesson's step; the failure names the strategy and the rank
        assert re.search(r"FAIL \w+, rank \d: returned \d+ bytes after a step in which some parameters", str(report))


# Every tensor of the state but Adam's step: right shards, DTensors read locally.
FORGOT_STEP = """\
import torch


def state_bytes(optimizer):
    inner = getattr(optimizer, "optim", optimizer)
    tensors = [t for state in inner.state.values() for key, t in state.items() if key != "step"]
    return sum(t.to_local().nbytes if hasattr(t, "to_local") else t.nbytes for t in tensors)
"""


def test_checker_names_adams_step_entries_when_left_out(tmp_path, monkeypatch):
    report = _check(tmp_path, monkeypatch, "nostep10", FORGOT_STEP, world_size=2, predicted=PREDICTED_ON_2)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert fails and all("leaves out Adam's `step` entries" in line for line in fails), str(report)
    assert not any(".optim" in line or ".to_local()" in line for line in fails)


WRITTEN_DIFFERENTLY = """\
import torch


def state_bytes(optimizer):
    inner = optimizer.optim if hasattr(optimizer, "optim") else optimizer
    tensors = [t for state in inner.state.values() for t in state.values() if torch.is_tensor(t)]
    return sum(t.to_local().nbytes if hasattr(t, "to_local") else t.nbytes for t in tensors)
"""


def test_checker_passes_a_right_answer_written_differently_on_2_ranks(tmp_path, monkeypatch):
    report = _check(tmp_path, monkeypatch, "other10", WRITTEN_DIFFERENTLY, predicted=PREDICTED_ON_2, world_size=2)
    assert report.passed, str(report)


def test_checker_refuses_a_world_size_below_2():
    with pytest.raises(ValueError, match="world_size must be an int of at least 2, got 1"):
        lesson10.check_state_bytes(solutions.state_bytes, PREDICTED_ON_3, world_size=1)


def test_a_missed_prediction_is_told_high_or_low_without_the_bytes_held():
    held = {"ddp": 2_107_440, "zero1": 1_048_584, "fsdp": 705_640}
    results = [{s: {"lesson": {"exact": held[s]}} for s in lesson10.STRATEGIES}]
    report = lesson10.Report()
    lesson10.compare_predictions({"ddp": held["ddp"], "zero1": 1, "fsdp": int(held["fsdp"] * 1.03)}, results, report)
    text = str(report)
    assert not report.passed
    assert f"ddp: you predicted {held['ddp']:,} bytes on rank 0, it holds {held['ddp']:,}" in text
    assert "zero1: you predicted 1 bytes on rank 0: too low, by more than 2%" in text
    assert "fsdp: you predicted 726,809 bytes on rank 0: too high, by more than 2%" in text
    for strategy in ("zero1", "fsdp"):
        assert f"{held[strategy]:,}" not in text and str(held[strategy]) not in text


def test_bytes_sent_per_step_from_the_traced_collectives():
    ranks = run_ranks(compare_strategies, 2, kwargs=dict(strategies="ddp,ddp_view,zero1,fsdp,fsdp_no_reshard", steps=3),
                      show_output=False)
    runs = ranks[0]
    param_bytes = runs["ddp"]["n_params"] * 4
    assert runs["ddp"]["payloads"] == [("all_reduce", param_bytes)]  # one bucket: 1.05 MB < 25 MiB
    assert runs["ddp_view"]["payloads"] == runs["ddp"]["payloads"]
    broadcasts = [size for kind, size in runs["zero1"]["payloads"] if kind == "broadcast"]
    assert len(broadcasts) == 10 and sum(broadcasts) == param_bytes  # every parameter once, from its owner
    sent = {s: bytes_sent(r["payloads"], 2) / bytes_sent(runs["ddp"]["payloads"], 2) for s, r in runs.items()}
    assert 1.45 < sent["zero1"] < 1.55 and 1.45 < sent["fsdp"] < 1.55
    assert abs(sent["fsdp_no_reshard"] - 1) < 0.01
    kinds = [kind for kind, _ in runs["fsdp"]["payloads"]]
    assert kinds.count("all_gather") == 10 and kinds.count("reduce_scatter") == 5
    # Where the gradients lie, by address: plain DDP keeps them apart from its bucket, a second copy as
    # large as the gradients; gradient_as_bucket_view=True makes every gradient a view into the bucket.
    for r in (ranks[0], ranks[1]):
        plain, view = r["ddp"]["layout"], r["ddp_view"]["layout"]
        assert plain["gradient_storages"] == 10 and not plain["gradients_inside_buckets"]
        assert plain["bucket_bytes"] == r["ddp"]["bytes"]["gradients"]
        assert view["gradient_storages"] == view["buckets"] == 1 and view["gradients_inside_buckets"]
        assert r["fsdp"]["layout"] is None  # no DDP, no buckets
        # What the forward leaves held, by storage object: FSDP2 with reshard frees its gathered weights
        # (what DDP keeps); without reshard it keeps every gathered weight, as many bytes as its all-gathers.
        kept = {s: r[s]["bytes"]["activations"] for s in r}
        assert kept["fsdp"] == kept["ddp"] == kept["zero1"] > 0
        gathered = sum(size for kind, size in r["fsdp_no_reshard"]["payloads"] if kind == "all_gather")
        assert kept["fsdp_no_reshard"] - kept["ddp"] == gathered
        assert all(len(r[s]["step_ms"]) == 21 and min(r[s]["step_ms"]) > 0 for s in r)
        assert all(len(r[s]["step_cpu_ms"]) == 21 and min(r[s]["step_cpu_ms"]) >= 0 for s in r)


def test_the_activation_checkpointing_schematic_keeps_one_input_and_recomputes():
    from ddp_lib.plots.beyond import plot_activation_checkpointing

    # plain: 4 forwards, 4 backwards, 4 activations' lifetimes; one segment: 4 forwards, 4 forwards
    # again, 4 backwards, the kept input's lifetime and 4 activations'; each layer its own checkpoint:
    # the same steps, 4 kept inputs and 4 activations; and the legend's two boxes
    fig = plot_activation_checkpointing(4)
    assert len(fig.axes[0].patches) == (4 + 4 + 4) + (4 + 4 + 4 + 1 + 4) + (4 + 4 + 4 + 4 + 4) + 2
    bars = {text.get_text(): text for text in fig.axes[0].texts}
    assert {"input", "input 1", "input 4", "layer 1", "layer 4"} <= set(bars)
    # in the recipe's row, layer 4 runs again just before its backward, and layer 1 last
    steps = [t.get_text() for t in fig.axes[0].texts if t.get_position()[1] == 1.5 + 0.3]
    assert steps[4:12] == ["forward\n4 again", "backward\n4", "forward\n3 again", "backward\n3",
                         "forward\n2 again", "backward\n2", "forward\n1 again", "backward\n1"]


def test_the_who_holds_what_schematic_draws_every_stage():
    from ddp_lib.plots.beyond import SHARDED, plot_who_holds_what

    assert list(SHARDED) == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP2"]
    fig = plot_who_holds_what(2)
    # per stage and rank: a dotted outline for each of the 3 parts, and the part (whole or the rank's slice)
    assert len(fig.axes[0].patches) == len(SHARDED) * 2 * 3 * 2


def test_the_memory_bars_stack_the_activations_on_top_where_given():
    from ddp_lib.plots.beyond import LEGEND, PARTS, plot_memory_bars

    fig = plot_memory_bars({"2 ranks": {"DDP": {"parameters": 4e6, "activations": 1e6}, "FSDP2": {"parameters": 2e6}}})
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.containers] == [*PARTS, LEGEND["activations"]]
    top = ax.containers[-1]  # the activations: 1 MB on DDP's 4, none on FSDP2
    assert [(bar.get_y(), bar.get_height()) for bar in top] == [(4.0, 1.0), (2.0, 0.0)]


def test_fsdp2s_backward_schematic_prefetches_as_the_trace_shows():
    from ddp_lib.plots.beyond import step_schedules

    backward = [label for label, kind in step_schedules(3)["FSDP2"][6:] if kind != "compute"]
    assert backward == ["AG3", "AG2", "RS3", "AG1", "RS2", "RS1"]


def test_the_step_schematic_sends_what_the_ring_factors_say():
    from ddp_lib.plots.beyond import SEND_FACTOR, step_schedules

    def sent(boxes):  # in units of one layer's bytes, 3 layers, 2 ranks
        return sum(SEND_FACTOR[kind] * (3 if label == "AR" else 1)
                   for label, kind in boxes if kind != "compute")

    schedules = step_schedules(3)
    assert {name: sent(boxes) for name, boxes in schedules.items()} == {
        "DDP": 3, "ZeRO-1 (torch)": 4.5, "FSDP2": 4.5, "FSDP2, no reshard": 3}
    # torch's ZeRO-1 broadcasts each parameter tensor apart: one box, and one fixed cost, per layer
    assert [kind for _, kind in schedules["ZeRO-1 (torch)"]].count("broadcast") == 3


def test_the_step_schematic_draws_only_the_rows_asked_for():
    from ddp_lib.plots.beyond import plot_step_schedules, step_schedules

    rows = ("FSDP2", "FSDP2, no reshard")
    boxes = sum(len(step_schedules(3)[name]) for name in rows)
    assert len(plot_step_schedules(3, strategies=rows).axes[0].patches) == boxes
    assert len(plot_step_schedules(3).axes[0].patches) == sum(len(b) for b in step_schedules(3).values())


def test_the_step_schematic_as_time_adds_the_fixed_cost_to_each_collective_only():
    from ddp_lib.plots.beyond import plot_step_schedules

    def widths(fig):
        return [p.get_width() for p in fig.axes[0].patches]

    plain = widths(plot_step_schedules(3, strategies=("FSDP2, no reshard",)))
    timed = widths(plot_step_schedules(3, strategies=("FSDP2, no reshard",), fixed_cost=1.0))
    added = [round(b - a, 9) for a, b in zip(plain, timed)]
    assert sorted(set(added)) == [0, 1] and added.count(1) == 6  # 3 all-gathers and 3 reduce-scatters


def test_the_mesh_schematic_draws_four_ranks_two_rows_and_two_columns():
    from ddp_lib.plots.beyond import plot_mesh_2x2

    assert len(plot_mesh_2x2().axes[0].patches) == 4 + 2 + 2


def test_rank0_only_evaluation_of_a_sharded_model_fails_at_the_timeout():
    with pytest.raises(WorkerError) as failure:
        run_ranks(rank0_evaluation, 2, kwargs=dict(detail=False), show_output=False)
    assert sorted(failure.value.failures) == [0, 1]
    assert any("Timed out" in line for line in failure.value.failures.values())


def test_rank0_only_evaluation_under_detail_names_each_ranks_collective():
    with pytest.raises(WorkerError) as failure:
        run_ranks(rank0_evaluation, 2, show_output=False)
    messages = failure.value.failures
    assert "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=2, OpType=_ALLGATHER_BASE" in messages[0]
    assert "Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=2OpType=BARRIER" in messages[1]


def test_the_step_schematic_labels_ddp_as_one_bucket():
    import matplotlib.pyplot as plt

    from ddp_lib.plots.beyond import plot_step_schedules

    fig = plot_step_schedules(layers=3)
    labels = [tick.get_text() for tick in fig.axes[0].get_yticklabels()]
    plt.close(fig)
    # top row first: DDP's single all-reduce is drawn after backward because this model fits one bucket
    assert labels[::-1] == ["DDP (one bucket here)", "ZeRO-1: broadcasts one\nper tensor, drawn per layer", "FSDP2",
                            "FSDP2, no reshard"]


def test_the_performance_pages_lesson_10_code_prints_what_the_page_shows():
    import contextlib
    import io
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "performance.md").read_text()
    notes = page[page.index("## Lesson 10"):]
    blocks = re.findall(r"```python\n(.*?)```", notes, re.S)
    shown = re.findall(r"```text\n(.*?)```", notes, re.S)
    # the 7B step priced; gloo's broadcast tree; the plain script's last lines; the profiler against the
    # count; the fixed cost of a call
    assert len(blocks) == len(shown) == 5
    for code, text in zip(blocks, shown):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, {})
        assert out.getvalue() == text
