"""Lesson 09's workers and exercise checkers, run on real gloo ranks (the checkers on 2, then 3)."""

import re
import textwrap

import pytest
import torch
from answer_files import notebook_stub

from ddp_lib.demos.early_stop import early_stop
from ddp_lib.demos.loop_runs import (
    clip_norm_lines,
    compile_order_counts,
    compile_order_lines,
    compile_order_pieces,
    count_graphs,
    failure_lines,
    max_param_diff,
    measured_runs,
    overflow_step_lines,
    plain_script,
    train_loop_measured,
)
from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.exercises import lesson09
from ddp_lib.exercises.solutions import lesson09 as solutions
from ddp_lib.launch import launch, run_ranks
from ddp_lib.launch._worker_params import COMPILE_BACKENDS
from ddp_lib.process_group import in_one_job
from ddp_lib.workers.compiled import DeepNet, compiled_graphs, compiled_graphs_for, small_bucket_error
from ddp_lib.workers.training_loop import (
    LoopNet,
    accumulate_and_clip,
    batchnorm_drift,
    evaluate_padded,
    mismatched_collectives,
    rank0_evaluation,
    rank0_saves,
    scaler_overflow,
    seeds_and_logging,
    train_loop,
)


def test_bf16_autocast_keeps_fp32_gradients_and_ddp_all_reduces_fp32():
    ranks = run_ranks(train_loop_measured, 2, kwargs=dict(epochs=1, precision="bf16", comm_hook="allreduce"),
                      show_output=False)
    dtypes = ranks[0]["dtypes"]
    assert dtypes["logits"] == "bfloat16"
    assert dtypes["loss"] == "float32" and dtypes["gradients"] == "float32"
    assert dtypes["all_reduced"] == ["float32"]
    assert ranks[0]["params"] == ranks[1]["params"]


def test_the_measured_loop_computes_what_the_copied_loop_computes():
    # The lesson measures train_loop_measured; a learner copies train_loop: the same numbers.
    for kwargs in (dict(epochs=1, lr=0.5, max_norm=0.5), dict(epochs=1, precision="fp16")):
        copied = run_ranks(train_loop, 2, kwargs=kwargs, show_output=False)
        measured = run_ranks(train_loop_measured, 2, kwargs=kwargs, show_output=False)
        for c, m in zip(copied, measured):
            assert {k: m[k] for k in c} == c


def test_the_measured_loop_keeps_the_short_last_batch_only_without_drop_last():
    # 256 samples per rank in batches of 24: 10 full batches, then one of 16 (exercise 5's ragged epoch)
    runs = {"dropped": dict(epochs=1, batch_size=24), "kept": dict(epochs=1, batch_size=24, drop_last=False)}
    for r in run_ranks(measured_runs, 2, kwargs=dict(runs=runs), show_output=False):
        assert len(r["dropped"]["step_seconds"]) == 10
        assert len(r["kept"]["step_seconds"]) == 11


def test_bf16_compression_sends_bfloat16_and_stays_close_to_fp32():
    fp32 = run_ranks(train_loop_measured, 2, kwargs=dict(epochs=2), show_output=False)[0]
    compressed = run_ranks(train_loop_measured, 2, kwargs=dict(epochs=2, comm_hook="bf16_compress"),
                           show_output=False)[0]
    assert compressed["dtypes"]["all_reduced"] == ["bfloat16"]
    assert compressed["losses"] != fp32["losses"]  # the rounding is real...
    assert max(abs(a - b) for a, b in zip(compressed["losses"], fp32["losses"])) < 0.01  # ...and small


def test_fp16_uses_a_grad_scaler():
    result = run_ranks(train_loop_measured, 2, kwargs=dict(epochs=1, precision="fp16"), show_output=False)[0]
    assert result["dtypes"]["logits"] == "float16" and result["scale"] is not None


def test_clipping_after_sync_matches_one_process_and_before_sync_does_not():
    kwargs = dict(epochs=1, lr=0.5, max_norm=0.5)
    after = run_ranks(train_loop_measured, 2, kwargs=kwargs, show_output=False)
    before = run_ranks(train_loop_measured, 2, kwargs=dict(kwargs, clip="before_sync"), show_output=False)
    one = run_ranks(train_loop_measured, 1, kwargs=dict(kwargs, batch_size=32), show_output=False)[0]
    assert after[0]["grad_norms"] == after[1]["grad_norms"]
    assert torch.allclose(torch.tensor(after[0]["params"]), torch.tensor(one["params"]), atol=1e-5)
    assert before[0]["grad_norms"] != before[1]["grad_norms"]  # each rank measured its own gradient
    assert before[0]["params"] == before[1]["params"]  # averaged afterwards, so the ranks still agree...
    assert (torch.tensor(before[0]["params"]) - torch.tensor(one["params"])).abs().max() > 1e-3  # ...on a wrong step


@pytest.mark.parametrize("fix, counted", [("none", 12), ("drop_last", 10), ("count_real", 11), ("subset", 11)])
def test_evaluation_counts(fix, counted):
    ranks = run_ranks(evaluate_padded, 2, kwargs=dict(n_eval=11, fix=fix), show_output=False)
    assert [r["counted"] for r in ranks] == [counted, counted]
    exact = ranks[0]["accuracy"] == ranks[0]["reference"]
    assert exact == (fix in ("count_real", "subset"))
    if fix == "subset":  # every second sample from the rank on, sample 0 once
        assert [r["indices"] for r in ranks] == [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9]]


def test_rank0_evaluation_without_collectives_works_and_with_one_times_out():
    ranks = run_ranks(rank0_evaluation, 2, show_output=False)
    assert ranks[0]["accuracy"] is not None and ranks[1]["accuracy"] is None
    assert ranks[0]["checksum"] == ranks[1]["checksum"]
    # Mismatched collectives: both ranks time out, or gloo sees the sizes differ, one rank fails
    # and the other finds its connection closed; which one is a matter of timing.
    with pytest.raises(WorkerError, match="Timed out|Connection closed") as failed:
        run_ranks(rank0_evaluation, 2, kwargs=dict(collective_in_eval=True, timeout_s=2.0), show_output=False)
    # Each rank's error names the collectives it called: rank 0's all-reduce met rank 1's broadcast.
    called = {rank: line.split("from the first step on: ")[-1] for rank, line in failed.value.failures.items()}
    assert called == {0: "allreduce, allreduce", 1: "allreduce, broadcast"}
    lines = failure_lines(failed.value)  # the lesson's printed lines: rank order, no address or port
    assert [line.split(":")[0] for line in lines] == ["rank 0", "rank 1"]
    assert not any(re.search(r"\[[^.\]]+\]|:[0-9]{4,5}\b", line) for line in lines)


def test_batch_norm_buffers_drift_apart_in_training_and_one_broadcast_each_makes_them_rank_0_s():
    ranks = run_ranks(batchnorm_drift, 2, show_output=False)
    for name in ("running_mean", "running_var", "logits"):
        assert not torch.equal(ranks[0]["before"][name], ranks[1]["before"][name])  # two models
        assert torch.equal(ranks[0]["after"][name], ranks[1]["after"][name])  # rank 0's, on both ranks
    assert torch.equal(ranks[0]["before"]["running_mean"], ranks[0]["after"]["running_mean"])  # rank 0 kept its own


def test_failure_lines_hide_addresses_and_ports_in_rank_order():
    error = WorkerError(1, "RuntimeError", "x", failures={
        1: "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:45231",
        0: "RuntimeError: Timed out waiting 2000ms for recv operation to complete"})
    assert failure_lines(error) == [
        "rank 0: RuntimeError: Timed out waiting 2000ms for recv operation to complete",
        "rank 1: RuntimeError: [...] Connection closed by peer [...]"]


def test_clip_norm_lines_and_max_param_diff():
    one = {"grad_norms": [0.7, 0.4, 0.3, 0.6, 0.2], "params": [1.0, 2.0]}
    after = [dict(one, rank=r) for r in (0, 1)]
    before = [{"rank": 0, "grad_norms": [0.6, 0.5, 0.4, 0.5]}, {"rank": 1, "grad_norms": [0.8, 0.4, 0.5, 0.3]}]
    lines = clip_norm_lines(one, after, before, max_norm=0.5)
    assert lines[0] == "one process:       gradient norms of the first steps [0.7, 0.4, 0.3, 0.6]"
    assert lines[1] == "after sync, rank 0: gradient norms of the first steps [0.7, 0.4, 0.3, 0.6]"
    assert lines[4] == "before sync, rank 1: gradient norms of the first steps [0.8, 0.4, 0.5, 0.3]"
    assert lines[-1] == "2 of 5 steps had a norm above 0.5, and were clipped" and len(lines) == 6
    assert max_param_diff({"params": [1.0, 2.5]}, one) == 0.5


def test_compile_order_lines_count_the_graphs_of_each_way():
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ways = {"DDP(torch.compile(model))": lambda model, backend: DDP(torch.compile(model, backend=backend)),
            "torch.compile(DDP(model))": lambda model, backend: torch.compile(DDP(model), backend=backend)}
    loop_net = compile_order_lines(LoopNet, ways)
    assert [line.split(": ")[1].split(";")[0] for line in loop_net] == ["1 graph(s)", "1 graph(s)"]
    assert "'module._orig_mod.fc1.weight'" in loop_net[0] and "'_orig_mod.module.fc1.weight'" in loop_net[1]
    seq = compile_order_lines(lambda: nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)), ways)
    assert [line.split(": ")[1].split(";")[0] for line in seq] == ["1 graph(s)", "0 graph(s)"]  # pytorch#140416
    assert not torch.distributed.is_initialized()  # the one-process group is gone


def test_compile_order_pieces_match_ddps_buckets_in_every_order_and_torch_nn_classes_compile_nothing():
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, x):
            return torch.tanh(self.linear(x))

    def in_place(model, backend):
        model.compile(backend=backend)
        return DDP(model)

    ways = {"model.compile(); DDP(model)": in_place,
            "DDP(torch.compile(model))": lambda model, backend: DDP(torch.compile(model, backend=backend)),
            "torch.compile(DDP(model))": lambda model, backend: torch.compile(DDP(model), backend=backend)}
    pieces = compile_order_pieces(DeepNet, ways)
    # DDP's default buckets: the first 1 MiB (the last layer and 4 hidden ones), the rest in the next
    assert all(line.endswith("pieces [1054728, 1055744] (bytes, output side first); DDP all-reduced "
                             "[1054728, 1055744]; split at buckets: True") for line in pieces), pieces
    counts = {name: [line.split(": ")[1] for line in compile_order_lines(make, ways, name, keys=False)]
              for name, make in {"linear": lambda: nn.Linear(2, 2),
                                 "blocks": lambda: nn.Sequential(Block(), Block())}.items()}
    assert counts == {"linear": ["0 graph(s)", "1 graph(s)", "0 graph(s)"],  # pytorch#150915, #140416
                      "blocks": ["2 graph(s)", "1 graph(s)", "2 graph(s)"]}  # one graph per block of your own
    assert not torch.distributed.is_initialized()


def test_compile_order_counts_tabulates_the_graphs_of_each_model_and_way():
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ways = {"DDP(torch.compile(model))": lambda model, backend: DDP(torch.compile(model, backend=backend)),
            "torch.compile(DDP(model))": lambda model, backend: torch.compile(DDP(model), backend=backend)}
    counts = compile_order_counts({"LoopNet": LoopNet, "nn.Linear": lambda: nn.Linear(2, 2)}, ways)
    assert counts == {"LoopNet": {"DDP(torch.compile(model))": 1, "torch.compile(DDP(model))": 1},
                      "nn.Linear": {"DDP(torch.compile(model))": 1, "torch.compile(DDP(model))": 0}}  # pytorch#140416
    assert not torch.distributed.is_initialized()


def test_count_graphs_without_ddp_sees_a_compiled_sequential_compile_nothing():
    from torch import nn

    def in_place(model, backend):
        model.compile(backend=backend)
        return model

    seq = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))
    assert count_graphs(seq, in_place, torch.randn(4, 2))[0] == 0  # seq.compile() captures nothing
    net = LoopNet()
    assert count_graphs(net, lambda model, backend: torch.compile(model, backend=backend), torch.randn(4, 2))[0] == 1


def test_a_stray_all_reduce_after_a_later_step_meets_the_gradient_all_reduce_and_gloo_aborts():
    with pytest.raises(WorkerError) as failed:
        run_ranks(rank0_evaluation, 2, kwargs=dict(collective_in_eval=True, eval_after_step=1, timeout_s=2.0),
                  show_output=False)
    failures = failed.value.failures
    assert "SIGABRT" in failures[0]  # gloo's size check throws in a thread of its own: the process aborts
    assert "Received data size doesn't match" in failed.value.outputs[0][1]
    assert failures[1].split("from the first step on: ")[-1] == "allreduce, broadcast, broadcast, allreduce, allreduce"
    assert not any("Timed out" in line for line in failures.values())


def test_accumulation_with_no_sync_all_reduces_once_per_step_and_equals_one_process():
    for r in run_ranks(accumulate_and_clip, 2, kwargs=dict(steps=2), show_output=False):
        assert r["all_reduces"] == r["steps"] == 2
        assert r["max_diff"] < 1e-6


def test_accumulation_under_fp16_scales_every_backward_and_steps_once():
    for r in run_ranks(accumulate_and_clip, 2, kwargs=dict(steps=2, precision="fp16"), show_output=False):
        assert r["all_reduces"] == r["steps"] == 2
        assert r["skipped"] == 0
        assert r["max_diff"] < 1e-3  # float16 activations against one process in float32


def test_mismatched_collectives_of_one_shape_finish_with_the_wrong_sum():
    ranks = run_ranks(mismatched_collectives, 2, show_output=False)
    assert [r["received"] for r in ranks] == [100.5, 100.5]


def test_the_lesson_schematics_draw():
    from ddp_lib.plots.loop import (
        plot_clipping,
        plot_collective_pairing,
        plot_compiled_backward,
        plot_dtype_flow,
        plot_padded_indices,
        plot_scale_over_steps,
    )

    assert len(plot_padded_indices(11, 2).axes[0].patches) == 12  # padded to a multiple of 2
    assert len(plot_padded_indices(7, 3).axes[0].patches) == 9
    # one graph: one backward box; pieces: one per bucket; an all-reduce per bucket in both rows
    assert len(plot_compiled_backward(3).axes[0].patches) == (1 + 3) + (3 + 3)
    assert len(plot_dtype_flow().axes[0].patches) == 8  # four forward boxes, four backward
    right, wrong = plot_clipping(2).axes  # six steps per rank and one frame in each panel
    assert len(right.patches) == len(wrong.patches) == 2 * 6 + 1
    # rank 0's coloured boxes (values that differ between ranks): backward only, or all four steps before the sync
    coloured = [sum(p.get_facecolor()[:3] != (0.85, 0.85, 0.85) for p in ax.patches[:6]) for ax in (right, wrong)]
    assert coloured == [1, 4]
    pairing = plot_collective_pairing().axes[0]
    assert len(pairing.patches) == 2 + 3  # rank 0's calls, rank 1's calls
    # rank 1's broadcasts are named as DDP's own, without the bucket rebuild's details
    assert [t.get_text() for t in pairing.texts].count("DDP's own broadcast\n(second forward)") == 2
    assert len(plot_scale_over_steps(7, 2).axes[0].lines) == 1 + 7  # the scale, a marker per step


def test_the_habit_schematics_draw_one_row_per_rank():
    from ddp_lib.plots.loop_sketches import (
        plot_buffer_drift,
        plot_no_sync_accumulation,
        plot_save_then_barrier,
        plot_seeds,
    )

    # per step one broadcast across the ranks and a box per rank, then an evaluation box per rank
    assert len(plot_buffer_drift(3, 2).axes[0].patches) == 3 * (1 + 2) + 2

    without, with_barrier = plot_save_then_barrier().axes
    assert len(without.patches) == 3 and len(with_barrier.patches) == 6  # the barrier adds its boxes
    # per rank a box per micro-batch, a clip and a step; one all-reduce across the ranks
    assert len(plot_no_sync_accumulation(3, 2).axes[0].patches) == 2 * (3 + 2) + 1
    assert len(plot_seeds(2).axes[0].patches) == 2 * 3


def test_the_scale_schematic_follows_a_real_grad_scaler():
    from ddp_lib.plots.loop import scale_schedule

    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    scales = []
    for step in range(7):
        scales.append(scaler.get_scale())
        optimizer.zero_grad()
        scaler.scale((weight * (float("inf") if step == 2 else 1.0)).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
    assert scales == scale_schedule(7, overflow_step=2, init_scale=1024.0, growth_interval=2)


def test_a_barrier_makes_the_other_ranks_wait_for_rank0s_save(tmp_path):
    ranks = run_ranks(rank0_saves, 2, kwargs=dict(directory=str(tmp_path), work_s=0.5), show_output=False)
    assert [r["found"]["barrier"] for r in ranks] == [True, True]
    assert ranks[1]["found"]["no barrier"] is False  # rank 1 looked while rank 0 still worked
    assert ranks[1]["waited_s"] >= 0.4


def test_rank0_work_longer_than_the_timeout_fails_the_barrier(tmp_path):
    with pytest.raises(WorkerError) as caught:
        run_ranks(rank0_saves, 2, kwargs=dict(directory=str(tmp_path), work_s=3.0, timeout_s=1.0), show_output=False)
    assert "Timed out" in caught.value.failures[1]  # rank 1 waited in the barrier past the timeout


def test_seeds_and_logging():
    job = launch(seeds_and_logging, 2, show_output=False)
    assert job.results[0]["init_checksum"] == job.results[1]["init_checksum"]
    assert job.results[0]["dropout_mask"] != job.results[1]["dropout_mask"]
    assert job.stderr[0].splitlines()[0].startswith("[rank 0] INFO model with")
    assert job.stderr[1] == "[rank 1] WARNING my evaluation shard holds 1 padding duplicate(s)\n"


def test_compiled_loop_compiles_its_model_and_equals_eager():
    eager = run_ranks(train_loop_measured, 2, kwargs=dict(epochs=1, hidden=64), show_output=False)
    compiled = run_ranks(train_loop_measured, 2,
                         kwargs=dict(epochs=1, hidden=64, compile=True, compile_backend="aot_eager"), show_output=False)
    # One graph per rank: LoopNet's parameters fit in one DDP bucket. A bare nn.Sequential gives 0.
    assert [r["compiled_graphs"] for r in compiled] == [1, 1]
    assert [r["compiled_graphs"] for r in eager] == [0, 0]
    assert max(abs(a - b) for a, b in zip(eager[0]["losses"], compiled[0]["losses"])) < 1e-4
    assert compiled[0]["params"] == compiled[1]["params"]


def test_an_unknown_compile_backend_is_refused_before_any_process_starts():
    with pytest.raises(LaunchInputError, match=r"^compile_backend must be one of 'inductor', 'aot_eager', "
                                               r"'eager', got 'inductr'$"):
        run_ranks(train_loop, 2, kwargs=dict(compile=True, compile_backend="inductr"), show_output=False)


def test_the_accepted_compile_backends_are_torchs_own():
    assert set(COMPILE_BACKENDS) <= set(torch._dynamo.list_backends(exclude_tags=()))
    assert "aot_eager" not in torch._dynamo.list_backends()  # why the accepted names are a list of our own


EVALUATE_STUB = notebook_stub("09_training_loop.ipynb", "my_work/lesson09_evaluate.py")
TRAIN_STEP_STUB = notebook_stub("09_training_loop.ipynb", "my_work/lesson09_train_step.py")


def _load(tmp_path, monkeypatch, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return __import__(name)


def test_evaluate_checker_passes_the_solution_on_2_and_3_ranks():
    report = str(lesson09.check_evaluate(solutions.evaluate))
    assert "PASS world_size 2" in report and "PASS world_size 3" in report and "FAIL" not in report


def test_evaluate_checker_fails_the_stub(tmp_path, monkeypatch):
    stub = _load(tmp_path, monkeypatch, "stub09_eval", EVALUATE_STUB)
    report = str(lesson09.check_evaluate(stub.evaluate))
    assert report.startswith("FAIL") and "all_reduce" in report


def test_evaluate_checker_names_the_padding(tmp_path, monkeypatch):
    counts_padding = EVALUATE_STUB.replace("return correct / len(sampler)", textwrap.dedent("""\
        counts = torch.tensor([float(correct), float(len(sampler))])
            torch.distributed.all_reduce(counts)
            return (counts[0] / counts[1]).item()"""))
    module = _load(tmp_path, monkeypatch, "padded09_eval", counts_padding)
    report = str(lesson09.check_evaluate(module.evaluate))
    assert report.startswith("FAIL") and "padding duplicate" in report


def test_train_step_checker_passes_the_solution_on_2_and_3_ranks():
    report = str(lesson09.check_train_step(solutions.train_step))
    assert "PASS world_size 2" in report and "PASS world_size 3" in report and "FAIL" not in report


def test_train_step_checker_fails_the_stub(tmp_path, monkeypatch):
    stub = _load(tmp_path, monkeypatch, "stub09_step", TRAIN_STEP_STUB)
    report = str(lesson09.check_train_step(stub.train_step))
    assert report.startswith("FAIL") and "no_sync" in report and "divide the loss" in report


def test_train_step_checker_names_a_missing_clip(tmp_path, monkeypatch):
    import inspect
    clip_line = "    nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)\n"
    no_clip = inspect.getsource(solutions).replace(clip_line, "")
    module = _load(tmp_path, monkeypatch, "noclip09_step", no_clip)
    report = str(lesson09.check_train_step(module.train_step))
    assert report.startswith("FAIL") and "clip_grad_norm_" in report



WHOLE_SET_ALONE = """\
import torch


def evaluate(model, dataset, rank, world_size):
    with torch.no_grad():
        right = [int(model(dataset[i][0].unsqueeze(0)).argmax(1).item() == dataset[i][1].item())
                 for i in range(len(dataset))]
    return sum(right) / len(right)
"""

# A right answer written differently: names imported from torch.distributed's modules, a float32
# pair, and the sampler's real length taken from the index list instead of the position test.
RIGHT_WRITTEN_DIFFERENTLY = """\
import torch
from torch.distributed import distributed_c10d
from torch.utils.data import DistributedSampler


def evaluate(model, dataset, rank, world_size):
    indices = list(DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False))
    real = len(range(rank, len(dataset), world_size))
    hits = sum(int(model(dataset[i][0][None]).argmax().item() == int(dataset[i][1])) for i in indices[:real])
    counts = torch.tensor([hits, real], dtype=torch.float32)
    distributed_c10d.all_reduce(counts, op=distributed_c10d.ReduceOp.SUM)
    return float(counts[0] / counts[1])
"""

CONCATENATED = """\
import torch
from torch import nn


def train_step(ddp_model, optimizer, micro_batches, max_norm):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    nn.functional.cross_entropy(ddp_model(x), y).backward()
    nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()
"""

CLIP_INSIDE_THE_LOOP = """\
from contextlib import nullcontext

from torch import nn


def train_step(ddp_model, optimizer, micro_batches, max_norm):
    for k, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if k < len(micro_batches) - 1 else nullcontext():
            (nn.functional.cross_entropy(ddp_model(x), y) / len(micro_batches)).backward()
        nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()
"""


def test_evaluate_checker_refuses_every_rank_evaluating_the_whole_set_alone(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "alone09_eval", WHOLE_SET_ALONE)
    report = lesson09.check_evaluate(module.evaluate)
    assert not report.passed and "all_reduce" in str(report)


def test_evaluate_checker_passes_a_right_answer_written_differently(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "other09_eval", RIGHT_WRITTEN_DIFFERENTLY)
    assert lesson09.check_evaluate(module.evaluate).passed


def test_train_step_checker_refuses_one_forward_on_the_concatenated_micro_batches(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "concat09_step", CONCATENATED)
    report = str(lesson09.check_train_step(module.train_step))
    assert report.startswith("FAIL") and "one forward and backward per micro-batch" in report


def test_train_step_checker_refuses_clipping_inside_the_accumulation_loop(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "inside09_step", CLIP_INSIDE_THE_LOOP)
    report = str(lesson09.check_train_step(module.train_step, world_sizes=(3,)))
    assert report.startswith("FAIL") and "clip once, after the last micro-batch" in report




SPLIT_SETTINGS = {"split": dict(optimize_ddp=True), "whole": dict(optimize_ddp=False),
                  "sequential": dict(model="sequential", wrap_first=True), "cap_2mb": dict(bucket_cap_mb=2.0)}


@pytest.fixture(scope="module")
def compiled_runs() -> dict[str, list[dict]]:
    """compiled_graphs on 2 ranks for each of SPLIT_SETTINGS (one job): {setting: [rank 0, rank 1]}."""
    ranks = run_ranks(compiled_graphs_for, 2, kwargs=dict(settings=list(SPLIT_SETTINGS.values())), show_output=False)
    return {name: [ranks[0][i], ranks[1][i]] for i, name in enumerate(SPLIT_SETTINGS)}


def test_optimize_ddp_with_1_mib_buckets_cuts_one_piece_per_ddp_bucket(compiled_runs):
    for r in compiled_runs["split"]:
        assert len(r["buckets"]) == 3 and r["allreduces_per_step"] == [1, 3]  # DDP rebuilt its buckets
        # dynamo hands the pieces over in forward order; DDP fills buckets from the output back
        assert [g["bytes"] for g in reversed(r["graphs"])] == r["buckets"]
        assert sum(g["parameters"] for g in r["graphs"]) == len(list(DeepNet().parameters()))
        assert r["max_diff"] < 1e-6


def test_without_optimize_ddp_one_graph_holds_every_parameter(compiled_runs):
    for r in compiled_runs["whole"]:
        assert len(r["graphs"]) == 1 and r["graphs"][0]["bytes"] == sum(r["buckets"])
        assert len(r["buckets"]) == 3  # DDP's buckets do not depend on the compile
        assert r["max_diff"] < 1e-6


def test_a_bare_sequential_under_ddp_gives_dynamo_no_graph(compiled_runs):
    for r in compiled_runs["sequential"]:
        assert r["graphs"] == [] and len(r["buckets"]) == 3


def test_ddp_optimizer_first_bucket_is_1_mib_whatever_ddp_uses(compiled_runs):
    for r in compiled_runs["cap_2mb"]:
        first_from_output = r["graphs"][-1]["bytes"]
        assert 2**20 <= first_from_output < r["buckets"][0]  # cut at 1 MiB; DDP's first bucket is ~2 MiB
        assert [g["bytes"] for g in reversed(r["graphs"])] != r["buckets"]


def test_torch_compile_of_ddp_with_half_a_mib_buckets_raises_on_every_rank():
    errors = [r["error"] for r in run_ranks(small_bucket_error, 2, show_output=False)]
    assert all(e.startswith("AssertionError: First bucket should be smaller/equal") for e in errors)


def test_in_one_job_runs_each_worker_in_the_same_group_in_order():
    calls = {way: ("ddp_lib.workers.training_loop:evaluate_padded", dict(n_eval=11, fix=way))
             for way in ("none", "count_real")}
    ranks = run_ranks(in_one_job, 2, kwargs=dict(calls=calls), show_output=False)
    assert [list(r) for r in ranks] == [["none", "count_real"]] * 2
    assert [ranks[0][way]["counted"] for way in calls] == [12, 11]


def test_the_lesson_s_one_job_helpers_run_each_way_in_order():
    from ddp_lib.demos.loop_runs import EVAL_WAYS, accumulate_fp32_and_fp16, evaluate_each_way

    counting = run_ranks(evaluate_each_way, 2, kwargs=dict(n_eval=11), show_output=False)
    assert EVAL_WAYS == ("none", "drop_last", "count_real", "subset")
    assert [list(r) for r in counting] == [list(EVAL_WAYS)] * 2
    assert [counting[0][way]["counted"] for way in EVAL_WAYS] == [12, 10, 11, 11]
    accumulated = run_ranks(accumulate_fp32_and_fp16, 2, show_output=False)
    assert [list(r) for r in accumulated] == [["fp32", "fp16"]] * 2
    assert all(r[p]["all_reduces"] == r[p]["steps"] for r in accumulated for p in ("fp32", "fp16"))


def test_a_bucket_below_1_mib_is_refused_by_torch_and_by_the_worker():
    from torch._dynamo.backends.distributed import DDPOptimizer

    with pytest.raises(AssertionError, match="First bucket"):
        DDPOptimizer(bucket_bytes_cap=2**19, backend_compile_fn=lambda gm, example_inputs: gm.forward)
    with pytest.raises(ValueError, match=r"bucket_cap_mb=0.5: .* at least 1"):
        compiled_graphs(0, 2, bucket_cap_mb=0.5)


# Every rank steps on its own micro-batches, never through DDP: no collective at all.
NO_COLLECTIVE_STEP = """\
from torch import nn


def train_step(ddp_model, optimizer, micro_batches, max_norm):
    for x, y in micro_batches:
        (nn.functional.cross_entropy(ddp_model.module(x), y) / len(micro_batches)).backward()
    nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()
"""

# A right answer written differently (nanoGPT's way): require_backward_grad_sync set before each
# forward instead of no_sync, the summed loss scaled once, clipping through torch.nn.utils.
REQUIRE_BACKWARD_GRAD_SYNC = """\
import torch


def train_step(ddp_model, optimizer, micro_batches, max_norm):
    for k, (x, y) in enumerate(micro_batches):
        ddp_model.require_backward_grad_sync = k == len(micro_batches) - 1
        loss = torch.nn.functional.cross_entropy(ddp_model(x), y, reduction="sum") / (len(y) * len(micro_batches))
        loss.backward()
    torch.nn.utils.clip_grad_norm_(ddp_model.module.parameters(), max_norm)
    optimizer.step()
"""

# The solution's evaluation with world_size written as 2.
HARD_CODED_TWO_RANKS = """\
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler


def evaluate(model, dataset, rank, world_size):
    counts = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for i, index in enumerate(DistributedSampler(dataset, num_replicas=2, rank=rank % 2, shuffle=False)):
            if rank % 2 + i * 2 < len(dataset):
                x, y = dataset[index]
                counts += torch.tensor([float(model(x[None]).argmax(1).item() == y.item()), 1.0], dtype=torch.float64)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()
"""

# A right answer through a ProcessGroup method and names imported from torch.distributed.
PROCESS_GROUP_METHOD = """\
import torch
from torch.distributed import ReduceOp, group


def evaluate(model, dataset, rank, world_size):
    mine = range(rank, len(dataset), world_size)  # the sampler's real positions, shuffle=False
    with torch.no_grad():
        hits = sum(int(model(dataset[i][0][None]).argmax(1).item() == dataset[i][1].item()) for i in mine)
    counts = torch.tensor([float(hits), float(len(mine))], dtype=torch.float64)
    group.WORLD.allreduce([counts], ReduceOp.SUM).wait()
    return (counts[0] / counts[1]).item()
"""


def test_train_step_checker_refuses_a_step_without_any_collective(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "nocoll09_step", NO_COLLECTIVE_STEP)
    report = lesson09.check_train_step(module.train_step, world_sizes=(3,))
    assert not report.passed and "differ from rank 0's" in str(report)


def test_train_step_checker_passes_require_backward_grad_sync(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "rbgs09_step", REQUIRE_BACKWARD_GRAD_SYNC)
    assert lesson09.check_train_step(module.train_step).passed


def test_evaluate_checker_refuses_a_world_size_hard_coded_to_2(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "two09_eval", HARD_CODED_TWO_RANKS)
    report = lesson09.check_evaluate(module.evaluate)
    assert not report.passed
    assert "PASS world_size 2" in str(report) and "FAIL world_size 3" in str(report)  # right on 2 ranks, not on 3


def test_evaluate_checker_passes_a_process_group_method(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "pgm09_eval", PROCESS_GROUP_METHOD)
    assert lesson09.check_evaluate(module.evaluate).passed



# Each rank's own accuracy, all-reduced and averaged: the shards differ in size, so it is not the
# accuracy over every sample.
AVERAGED_ACCURACIES = """\
import torch
import torch.distributed as dist


def evaluate(model, dataset, rank, world_size):
    mine = range(rank, len(dataset), world_size)
    with torch.no_grad():
        hits = sum(int(model(dataset[i][0][None]).argmax(1).item() == dataset[i][1].item()) for i in mine)
    accuracy = torch.tensor([hits / len(mine)], dtype=torch.float64)
    dist.all_reduce(accuracy)
    return accuracy.item() / world_size
"""

# no_sync around the backward only: the forward outside it already told DDP to all-reduce.
NO_SYNC_AROUND_BACKWARD_ONLY = """\
from contextlib import nullcontext

from torch import nn


def train_step(ddp_model, optimizer, micro_batches, max_norm):
    for k, (x, y) in enumerate(micro_batches):
        loss = nn.functional.cross_entropy(ddp_model(x), y) / len(micro_batches)
        with ddp_model.no_sync() if k < len(micro_batches) - 1 else nullcontext():
            loss.backward()
    nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()
"""


def test_evaluate_checker_names_averaged_accuracies(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "mean09_eval", AVERAGED_ACCURACIES)
    report = lesson09.check_evaluate(module.evaluate, world_sizes=(2,))
    assert not report.passed and "is the mean of the ranks' accuracies" in str(report), str(report)
    assert "all_reduce the correct and counted samples and divide once" in str(report)


def test_train_step_checker_names_a_forward_outside_no_sync(tmp_path, monkeypatch):
    module = _load(tmp_path, monkeypatch, "fwd09_step", NO_SYNC_AROUND_BACKWARD_ONLY)
    report = lesson09.check_train_step(module.train_step, world_sizes=(2,))
    (line,) = [line for line in report.lines if line.startswith("FAIL")]
    assert "no forward ran inside it; put the forward inside no_sync too" in line, str(report)


def test_measured_runs_in_one_job_equal_separate_launches():
    alone = run_ranks(train_loop_measured, 2, kwargs=dict(epochs=1, precision="bf16"), show_output=False)[0]
    runs = {"fp32": dict(epochs=1), "bf16": dict(epochs=1, precision="bf16")}
    together = run_ranks(measured_runs, 2, kwargs=dict(runs=runs), show_output=False)[0]
    assert list(together) == ["fp32", "bf16"]
    assert together["bf16"]["params"] == alone["params"] and together["bf16"]["losses"] == alone["losses"]


def test_an_early_stop_agreed_by_all_reduce_stops_every_rank_together_and_one_rank_alone_fails():
    ranks = run_ranks(early_stop, 2, show_output=False)
    assert [r["stopped_after_step"] for r in ranks] == [2, 2]
    with pytest.raises(WorkerError) as failure:
        run_ranks(early_stop, 2, kwargs=dict(agree=False), show_output=False)
    assert sorted(failure.value.failures) == [0]  # rank 1 left the loop; rank 0's all-reduce had no partner


def test_the_kept_inductor_run_holds_the_three_backends_it_names():
    from ddp_lib.demos.inductor_timing import TIMED, kept_run

    kept = kept_run()
    assert list(kept["runs"]) == list(TIMED) == ["eager", "aot_eager", "inductor"]
    for name, run in kept["runs"].items():
        assert run["steps"] == 64 and run["first_step_s"] > 0 and run["steady_step_s"] > 0, name
        assert run["compiled_graphs"] == (0 if name == "eager" else 1), name
        for key in ("first_step", "steady_step"):  # the median of the repeats, within their smallest and largest
            low, high = run[f"{key}_range_s"]
            assert low <= run[f"{key}_s"] <= high and run["repeats"] >= 2, (name, key)
    assert kept["runs"]["inductor"]["first_step_s"] > 10 * kept["runs"]["aot_eager"]["first_step_s"]
    assert kept["machine"]["cpus"] >= 1 and kept["torch"].startswith("2.")



def test_plain_script_trains_then_resumes_where_an_unbroken_run_would_be(tmp_path):
    def run(folder, *options):
        folder.mkdir(exist_ok=True)
        job = launch(plain_script, 2, kwargs=dict(directory=str(folder), options=list(options)), show_output=False)
        assert job.stdout[1] == ""  # only rank 0 prints
        return job.stdout[0].splitlines()

    first = run(tmp_path / "stopped", "--epochs", "2")
    assert [line.split(":")[0] for line in first[:2]] == ["epoch 0", "epoch 1"]
    assert first[2].startswith("held-out accuracy ")
    resumed = run(tmp_path / "stopped", "--resume", "--epochs", "3")
    assert resumed == run(tmp_path / "unbroken")[2:]  # epoch 2 and the held-out accuracy


def test_compile_split_lines_prints_each_rank_and_the_verdicts():
    from ddp_lib.demos.loop_runs import compile_split_lines

    def rank(r: int, split_started: int) -> dict:
        buckets = [300, 200, 10]
        return {"graphs": [{"rank": r, "graphs": [{"bytes": b} for b in reversed(buckets)], "buckets": buckets,
                            "max_diff": 0.0},
                           {"rank": r, "graphs": [{"bytes": 510}], "buckets": buckets, "max_diff": 1e-7}],
                "overlap": {"optimize_ddp=True": {"started_during_backward": split_started, "allreduces": 3},
                            "optimize_ddp=False": {"started_during_backward": 0, "allreduces": 3}}}

    lines = compile_split_lines([rank(0, 2), rank(1, 2)])
    assert lines[0] == ("split at buckets, rank 0: 3 graph(s) of parameter bytes [300, 200, 10]; DDP all-reduced "
                        "[300, 200, 10]; 2 of 3 all-reduces started before the last backward graph ended")
    assert len(lines) == 4 + 5 and all(line.endswith("True") for line in lines[4:])
    late = compile_split_lines([rank(0, 0), rank(1, 2)])  # rank 0's all-reduces all waited
    assert late[4 + 2].endswith("False") and late[4 + 3].endswith("True")


def test_hide_profiler_skip_warning_keeps_errors_only():
    import logging

    from ddp_lib.demos.loop_runs import hide_profiler_skip_warning

    logger = logging.getLogger("torch._dynamo.variables.ctx_manager")
    before = logger.level
    try:
        hide_profiler_skip_warning()
        assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
    finally:
        logger.setLevel(before)


def test_overflow_step_lines_on_a_real_overflow():
    overflow = run_ranks(scaler_overflow, 2, kwargs=dict(steps=4, overflow_step=2), show_output=False)
    lines = overflow_step_lines(overflow)
    assert len(lines) == 4
    assert lines[2] == ("step 2: scale   2048, gradients finite False | stepped: rank 0 False rank 1 False | "
                        "same gradients on both ranks: True")
    assert all("stepped: rank 0 True  rank 1 True " in line for i, line in enumerate(lines) if i != 2)


def test_the_step_time_lines_and_the_compile_order_table():
    from ddp_lib.demos.loop_runs import compile_order_table, compile_ways, step_time_lines

    line, = step_time_lines({"eager": {"step_seconds": [1.0, 0.1, 0.002, 0.004, 0.006, 0.008]}})
    assert line.strip().startswith("eager: first step 1.000 s") and "(median after 2) 5.00 ms" in line
    assert list(compile_ways()) == ["model.compile(); DDP(model)", "DDP(torch.compile(model))",
                                    "torch.compile(DDP(model))"]
    table = compile_order_table({"LoopNet": {"a": 1, "b": 0}})
    assert len(table) == 2 and table[1].split() == ["LoopNet", "1", "0"]


def test_rank0_evaluation_longer_than_the_timeout_fails_and_a_larger_timeout_lets_it_finish():
    with pytest.raises(WorkerError) as failed:
        run_ranks(rank0_evaluation, 2, kwargs=dict(eval_seconds=2.5, timeout_s=2.0), show_output=False)
    assert "Timed out" in failed.value.failures[1]  # rank 1 waited in its next collective
    ranks = run_ranks(rank0_evaluation, 2, kwargs=dict(eval_seconds=2.5, timeout_s=5.0), show_output=False)
    assert ranks[0]["checksum"] == ranks[1]["checksum"]


def test_clip_verdict_lines_compare_each_way_with_one_process():
    from ddp_lib.demos.loop_runs import clip_verdict_lines

    one = {"params": [1.0, 2.0]}
    after = [{"params": [1.0, 2.0]}, {"params": [1.0, 2.0]}]
    before = [{"params": [1.1, 2.0]}, {"params": [1.1, 2.0]}]
    lines = clip_verdict_lines(one, after, before)
    assert lines[0] == "clipped after sync: max parameter difference from one process below 1e-5; below 1e-5: True"
    assert lines[1].startswith("clipped before sync: max parameter difference from one process 1e-01")
    assert lines[1].endswith("False") and lines[2] == "clipped before sync, the ranks still agree: True"


def test_kept_run_lines_print_each_backend_and_one_verdict():
    from ddp_lib.demos.inductor_timing import kept_run, kept_run_lines

    kept = kept_run()
    lines = kept_run_lines(kept)
    assert lines[0].startswith(f"kept run of {kept['recorded']}") and len(lines) == 1 + len(kept["runs"]) + 2
    assert [line.split(":")[0].strip() for line in lines[1:4]] == list(kept["runs"])
    assert "break-even" in lines[-1] or "no break-even" in lines[-1]


def test_compile_order_logged_counts_and_keeps_dynamo_s_lines():
    from ddp_lib.demos.loop_runs import compile_order_logged, compile_order_models, compile_ways

    models = compile_order_models()
    counts, logged, warned = compile_order_logged({"nn.Linear": models["nn.Linear"]}, compile_ways())
    assert [way for way, graphs in counts["nn.Linear"].items() if graphs > 0] == ["DDP(torch.compile(model))"]
    assert all(isinstance(line, str) and line.split()[0] in ("WARNING", "ERROR", "CRITICAL") for line in logged)
    assert isinstance(warned, int)
