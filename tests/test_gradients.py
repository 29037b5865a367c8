"""Lesson 04: what DDP does to parameters and gradients, checked on gloo with real processes."""

import inspect

import pytest
import torch

from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks
from ddp_lib.workers import buckets, gradients

TOL = 1e-6  # float32: sums in a different order differ by a few ulps, never more


def test_ddp_broadcasts_rank0_parameters_at_construction():
    results = run_ranks(gradients.broadcast_at_construction, 2, show_output=False)
    assert results[0]["before"] != results[1]["before"]
    assert results[0]["after"] == results[1]["after"] == results[0]["before"]


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_forward_starts_with_rank0s_buffers(world_size):
    results = run_ranks(gradients.buffers_at_forward, world_size, show_output=False)
    assert [r["before"] for r in results] == [float(rank) for rank in range(world_size)]
    assert [r["at_start"] for r in results] == [0.0] * world_size
    # Each rank's own batch then moves its copy, so they differ again after the forward.
    assert len({r["after"] for r in results}) == world_size


def test_after_backward_every_rank_holds_the_mean_gradient():
    results = run_ranks(gradients.grads_after_backward, 2, show_output=False)
    assert results[0]["local_grad_sum"] != results[1]["local_grad_sum"]
    assert all(r["all_ranks_equal"] and r["equals_mean_of_local"] for r in results)
    mean = (results[0]["local_grad_sum"] + results[1]["local_grad_sum"]) / 2
    assert results[0]["ddp_grad_sum"] == pytest.approx(mean, abs=1e-5)


def test_mean_gradient_check_is_absolute_and_holds_on_three_ranks():
    # The lesson prints this verdict: an absolute tolerance of 1e-7 (rtol=0), as its other checks state.
    assert "allclose(synced, mean_of_local, rtol=0, atol=1e-7)" in inspect.getsource(gradients.grads_after_backward)
    results = run_ranks(gradients.grads_after_backward, 3, show_output=False)
    assert all(r["all_ranks_equal"] and r["equals_mean_of_local"] for r in results)


@pytest.mark.parametrize("world_size", [2, 3])
def test_n_ranks_with_batch_b_equal_one_process_with_batch_nb(world_size):
    results = run_ranks(gradients.ddp_run, world_size, (4, 5, 0, "mean"), show_output=False)
    reference = gradients.single_process_run(world_size * 4, 5, 0, "mean")
    for r in results:
        assert torch.allclose(r["first_grads"], reference["first_grads"], atol=TOL)
        assert torch.allclose(r["params"], reference["params"], atol=TOL)
    # The parameters moved: the comparison is not between two untouched copies.
    assert not torch.allclose(reference["params"], gradients.flat_params(gradients.make_mlp(0)), atol=1e-3)


def test_summed_loss_gives_gradients_world_size_times_smaller_than_one_process():
    results = run_ranks(gradients.ddp_run, 2, (4, 1, 0, "sum"), show_output=False)
    reference = gradients.single_process_run(8, 1, 0, "sum")
    assert torch.allclose(results[0]["first_grads"] * 2, reference["first_grads"], atol=1e-5)
    assert not torch.allclose(results[0]["first_grads"], reference["first_grads"], atol=1e-3)


def test_unequal_tokens_need_the_all_reduced_count_to_match_one_process():
    results = run_ranks(gradients.uneven_tokens, 2, kwargs=dict(tokens=(3, 12)))
    one = gradients.uneven_tokens_one_process(tokens=(3, 12))
    assert torch.equal(results[0]["mean"], results[1]["mean"])
    assert not torch.allclose(results[0]["mean"], one, rtol=0, atol=1e-3)  # the mean of means is off
    assert all(torch.allclose(r["fixed"], one, rtol=0, atol=1e-6) for r in results)


def test_unequal_tokens_refuses_fewer_counts_than_ranks():
    with pytest.raises(ValueError, match="one per rank"):
        gradients.uneven_tokens(0, 3, tokens=(3, 12))


def test_no_sync_accumulation_equals_the_large_batch_step():
    results = run_ranks(gradients.no_sync_run, 2, (4, 2, 3), show_output=False)
    reference = gradients.single_process_run(8, 3)
    for r in results:
        assert r["allreduces_per_micro_batch"] == [0, 1]
        assert torch.allclose(r["params"], reference["params"], atol=TOL)


def test_unused_parameter_raises_then_find_unused_parameters_fixes_it():
    with pytest.raises(WorkerError) as info:
        run_ranks(gradients.unused_parameters, 2, (False,), show_output=False)
    assert info.value.exc_type == "RuntimeError"
    assert info.value.message.startswith("Expected to have finished reduction in the prior iteration")
    results = run_ranks(gradients.unused_parameters, 2, (True,), show_output=False)
    assert all(r["b_weight_grad"] is None and r["steps"] == 3 for r in results)


def test_fp16_compression_changes_gradients_only_within_fp16_precision():
    results = run_ranks(gradients.fp16_compression, 2, (0, 4), show_output=False)
    r = results[0]
    diff = (r["plain"] - r["fp16"]).abs()
    assert diff.max() > 0  # the hook really ran
    assert torch.equal(sum(q["own"] for q in results) / 2, r["plain"])  # "own" is each rank's gradient alone
    # float16 keeps 11 significant bits: each rank's cast and division round by at most 2**-11 each, the sum once.
    u = 2.0 ** -11
    each_rank = sum(2 * u * q["own"].abs() / 2 for q in results)
    assert (diff <= (1 + u) * each_rank + u * r["plain"].abs() + 3 * 2.0 ** -25).all()
    assert diff.norm() / r["plain"].norm() < 1e-3
    # What the hook sent, recorded: its float32 bucket, all-reduced as float16 in half the bytes.
    assert r["sent"] == [{"bucket": ("torch.float32", 4 * r["plain"].numel()),
                          "all_reduce": ("torch.float16", 2 * r["plain"].numel())}]


def test_fp16_training_follows_float32_within_fp16_precision():
    results = run_ranks(gradients.fp16_training, 2, kwargs=dict(steps=6), show_output=False)
    r = results[0]
    assert results[1]["losses"] == r["losses"]  # the printed loss is the ranks' mean, the same on both
    f32, f16 = r["losses"]["float32"], r["losses"]["float16"]
    assert len(f32) == len(f16) == 6
    assert f32[0] == f16[0]  # same weights, same first batch: the first loss comes before any step
    assert f32[-1] < f32[0] and f16[-1] < f16[0]  # both train
    assert 0 < r["max_param_diff"] < 1e-3  # the hook changed the steps, by float16's rounding only
    assert max(abs(a - b) / a for a, b in zip(f32, f16)) < 1e-3


def test_bucket_cap_mb_sets_the_number_of_allreduces():
    # Step 0 uses one bucket for everything; DDP rebuilds buckets from the gradient order after it.
    counts = {cap: run_ranks(buckets.count_allreduces, 2, (cap,), show_output=False)[0] for cap in (25.0, 0.1, 0.05)}
    assert [counts[cap]["allreduces_per_step"] for cap in (25.0, 0.1, 0.05)] == [[1, 1, 1], [1, 2, 2], [1, 4, 4]]
    total = sum(p.numel() * 4 for p in gradients.make_mlp(0, buckets.WIDE).parameters())
    assert all(sum(c["bucket_bytes"]) == total for c in counts.values())


def test_timeline_first_allreduce_starts_before_backward_is_done():
    results = run_ranks(buckets.backward_timeline, 2, show_output=False)
    for r in results:
        assert len(r["allreduces"]) == 4 and len(r["grad_ready"]) == 7
        last_ready = max(t for _, t in r["grad_ready"])
        assert r["allreduces"][0]["start"] < last_ready  # overlap: communication began during backward
        assert all(a["end"] <= r["backward_ms"] for a in r["allreduces"])


def test_only_the_default_cap_gives_a_1_mib_first_bucket_and_find_unused_sends_it_last():
    sent, names = {}, {}
    for cap, find_unused in ((None, False), (25.0, False), (None, True)):
        r = run_ranks(buckets.count_allreduces, 2, kwargs=dict(bucket_cap_mb=cap, model="four_mib",
                                                         find_unused_parameters=find_unused), show_output=False)[0]
        sent[cap, find_unused] = r["bytes_in_order_sent"]
        names[cap, find_unused] = r["parameters_in_order_sent"]
    one_layer = 512 * 512 * 4 + 512 * 4
    assert sent[None, False] == [[4 * one_layer], [one_layer, 3 * one_layer], [one_layer, 3 * one_layer]]
    assert sent[25.0, False] == [[4 * one_layer]] * 3
    assert all(step[-1] == 512 * 512 * 4 and len(step) == 2 for step in sent[None, True])
    everything = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias", "6.weight", "6.bias"]
    assert names[None, False] == [[everything], [everything[6:], everything[:6]], [everything[6:], everything[:6]]]
    assert names[None, True] == [[everything[1:], ["0.weight"]]] * 3  # built at construction, never rebuilt


def test_find_unused_parameters_adds_one_allreduce_per_step():
    runs = {flag: run_ranks(gradients.unused_parameters, 2, kwargs=dict(find_unused_parameters=flag, use_b=True),
                            show_output=False)[0] for flag in (False, True)}
    assert runs[False]["collectives"]["allreduce_"] == 3 and runs[True]["collectives"]["allreduce_"] == 6
    # The two broadcasts come with the bucket rebuild, in step 1 only, and never with the flag.
    assert runs[False]["collectives_per_step"] == [{"allreduce_": 1}, {"allreduce_": 1, "broadcast_": 2},
                                                   {"allreduce_": 1}]
    assert runs[True]["collectives_per_step"] == [{"allreduce_": 2}] * 3


def test_ddp_reducer_multiplies_by_one_over_world_size_the_python_hook_a_kept_bucket_view_and_batched_copy_divide():
    for r in run_ranks(gradients.reducer_scaling, 3, show_output=False):
        assert r["entries_that_differ"] > 0
        assert (r["built_in"], r["allreduce_hook"], r["bucket_view"], r["batched_copy"]) == (
            "multiplied", "divided", "divided", "divided")


def test_scratch_buckets_overlap_backward_and_allreduce_after_backward_does_not():
    for way, overlaps in (("after_backward", False), ("buckets", True)):
        for r in run_ranks(buckets.backward_timeline, 2, kwargs=dict(way=way, bucket_cap_mb=0.6, warmup=1, repeats=3),
                           show_output=False):
            last_ready = max(t for _, t in r["grad_ready"])
            assert (r["allreduces"][0]["start"] < last_ready) is overlaps, way
            assert r["synced_ms"] >= max(a["end"] for a in r["allreduces"]) or way == "after_backward"
            # Lesson 04 counts wins over the timed passes: one time each, the last one the recorded pass.
            assert len(r["synced_ms_each"]) == 3 and r["synced_ms_each"][-1] == r["synced_ms"], r["synced_ms_each"]



def test_scratch_sync_times_times_both_ways_in_one_job():
    # Lesson 04's verdict on the scratch ways: both ways' passes, in turn, in one job.
    for r in run_ranks(buckets.scratch_sync_times, 2, kwargs=dict(warmup=1, repeats=3), show_output=False):
        assert sorted(r["synced_ms_each"]) == ["after_backward", "buckets"]
        assert all(len(ts) == 3 and all(t > 0 for t in ts) for ts in r["synced_ms_each"].values())
        # The pass lesson 04 draws: the one whose time is the median it prints, recorded in full.
        for way, times in r["synced_ms_each"].items():
            drawn = r["median_pass"][way]
            assert drawn["synced_ms"] == sorted(times)[len(times) // 2], way
            assert len(drawn["allreduces"]) == (14 if way == "after_backward" else 4), way
            assert len(drawn["grad_ready"]) == 7 and drawn["backward_ms"] <= drawn["synced_ms"], way

def test_fp16_hook_halves_the_bytes_and_the_time_on_a_slow_wire():
    # Lesson 04: the wire waits in proportion to the bytes, so half the bytes take less time.
    for r in run_ranks(gradients.fp16_on_slow_wire, 2, kwargs=dict(ms_per_mib=40.0, repeats=2), show_output=False):
        assert r["sent_bytes"]["float16"] * 2 == r["sent_bytes"]["float32"] == 4 * sum(
            p.numel() for p in gradients.make_mlp(0, (256,) * 8).parameters())
        assert len(r["ms"]["float32"]) == len(r["ms"]["float16"]) == 2
        assert min(r["ms"]["float32"]) >= 40.0 * r["sent_bytes"]["float32"] / 2**20  # backward waited for the wire
        assert sum(r["ms"]["float16"]) < sum(r["ms"]["float32"])


def test_fp16_compress_hook_divides_in_float16_after_the_cast():
    # Lesson 04: one step of 2**-24 is flushed to 0 on 2 ranks; on 3 ranks 2 steps come back as 3.
    expected = {2: [0.0, 2.0, 4.0, 4.0], 3: [0.0, 3.0, 3.0, 3.0]}
    for world_size, averaged in expected.items():
        for r in run_ranks(gradients.fp16_tiny_gradients, world_size, show_output=False):
            assert r["averaged"] == averaged


def test_the_new_lesson04_schematics_draw():
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import (
        plot_batch_split,
        plot_copy_vs_view,
        plot_fp16_flush_zone,
        plot_no_sync,
        plot_unused_head,
    )

    assert all(f().axes for f in (plot_batch_split, plot_copy_vs_view, plot_fp16_flush_zone, plot_no_sync,
                                  plot_unused_head))


def test_the_ddp_cycle_has_four_boxes_with_their_sections():
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.buckets import DDP_CYCLE, plot_ddp_cycle

    fig = plot_ddp_cycle()
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert len(fig.axes[0].patches) == 4
    assert {call for call, *_ in DDP_CYCLE} <= texts and {where for *_, where in DDP_CYCLE} <= texts


def test_the_ddp_cycle_puts_unused_parameters_where_ddp_handles_them():
    # Lesson 04's Summary: with find_unused_parameters=True the forward only finds the unused parameters;
    # backward marks them ready, with its first gradient. Every box's lines stay above its section label.
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.buckets import DDP_CYCLE, _joined, plot_ddp_cycle

    boxes = {call: " ".join(line.strip() for line in lines) for call, _, lines, _ in DDP_CYCLE}
    assert "find the unused ones" in boxes["ddp_model(x)"] and "mark" not in boxes["ddp_model(x)"]
    assert "unused ones ready" in boxes["loss.backward()"]
    # the forward decides whether the next backward syncs: no_sync() is named there too
    assert "inside no_sync(): its backward will send nothing" in boxes["ddp_model(x)"]
    # the buffer broadcast depends on the forward before this one, not on the last backward
    assert "unless the previous forward ran in no_grad or no_sync" in boxes["ddp_model(x)"]
    fig = plot_ddp_cycle()
    texts = fig.axes[0].texts
    box_lines = {line for _, _, lines, _ in DDP_CYCLE for line in _joined(lines)}
    assert all(t.get_fontsize() >= 9 for t in texts)  # readable at notebook width
    for patch in fig.axes[0].patches:  # in each box, every line stays above its section label
        inside = [t for t in texts if patch.contains_point(ax_point(fig, t.get_position()))]
        lowest_line = min(t.get_position()[1] for t in inside if t.get_text() in box_lines)
        label = max(t.get_position()[1] for t in inside if t.get_text().startswith("sections"))
        assert lowest_line > label + 0.2


def ax_point(fig, xy):
    """A point in data coordinates of the figure's only axes, in display coordinates."""
    return fig.axes[0].transData.transform(xy)


def test_no_sync_needs_the_forward_inside_it():
    # Lesson 04: a forward outside no_sync() makes the backward inside it synchronise anyway.
    for inside, expected in ((True, [0, 1]), (False, [1, 1])):
        r = run_ranks(gradients.no_sync_run, 2, kwargs=dict(forward_inside_no_sync=inside), show_output=False)[0]
        assert r["allreduces_per_micro_batch"] == expected


def test_epoch_end_leftover_micro_batches_must_be_synced():
    for rule, equal in (("step_once_more", False), ("synced", True)):
        r0, r1 = run_ranks(gradients.epoch_end_accumulation, 2, kwargs=dict(last_group=rule), show_output=False)
        assert torch.equal(r0["params"], r1["params"]) is equal
        assert torch.allclose(r0["params"], r0["one_process"], rtol=0, atol=1e-6) is equal


def test_the_plain_worker_starts_from_rank0s_weights_and_stays_in_step(monkeypatch):
    # Lesson 04's section 1: the plain-PyTorch worker, started as the lesson starts it.
    import ddp_lib.mp
    from ddp_lib.demos import plain_ddp
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    results = ddp_lib.mp.labelled_spawn(plain_ddp.worker, args=(2,), nprocs=2)
    assert results[0]["before"] != results[1]["before"]
    assert results[0]["after"] == results[1]["after"] == results[0]["before"]
    assert results[0]["trained"] == results[1]["trained"] != results[0]["after"]
    # the checksums are fingerprints; the weights themselves agree exactly
    weights = [r["weights"] for r in results]
    assert not torch.equal(weights[0]["before"], weights[1]["before"])
    assert all(torch.equal(w["after"], weights[0]["before"]) for w in weights)
    assert torch.equal(weights[0]["trained"], weights[1]["trained"])
