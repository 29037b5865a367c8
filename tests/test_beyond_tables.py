"""Lesson 10's tables, on made-up results: the bytes sent per step and the choice table."""

from ddp_lib.demos.beyond_tables import (
    bucket_copy_gone,
    bytes_table,
    carried,
    choice_table,
    held,
    hsdp_groups_match,
    hsdp_share,
    memory_bars,
    paper_bytes,
    print_counted,
    print_formula_gap,
    print_hsdp,
    print_loop_parts,
    seven_b_table,
    sizing,
)

N = 1000  # parameters of the made-up model


def result(strategy, payloads, state, activations=100, inside=True, bucket=4 * N, world_size=2):
    shard = 1 if strategy.startswith("fsdp") else world_size
    layout = None if strategy.startswith("fsdp") else {"bucket_bytes": bucket, "gradients_inside_buckets": inside}
    return [{"n_params": N, "payloads": payloads, "layout": layout,
             "collectives": {"c10d::x": len(payloads)},
             "bytes": {"parameters": 4 * N // shard, "gradients": 4 * N,
                       "optimizer state": state, "activations": activations}}]


def runs(world_size):
    p = 4 * N
    ddp = [("all_reduce", p)]
    zero = ddp + [("broadcast", p)]
    fsdp = [("all_gather", p // 2), ("all_gather", p // 2)] * 2 + [("reduce_scatter", p)]
    out = {"ddp": result("ddp", ddp, 8 * N, inside=False), "ddp_view": result("ddp_view", ddp, 8 * N),
           "zero1": result("zero1", zero, 4 * N, inside=False), "fsdp": result("fsdp", fsdp, 4 * N),
           "fsdp_no_reshard": result("fsdp_no_reshard", fsdp[:2] + fsdp[4:], 4 * N, activations=100 + p)}
    if world_size == 2:
        out["zero1_view"] = result("zero1_view", zero, 4 * N)
    return out


def test_held_adds_the_bucket_copy_only_outside_the_buckets():
    assert held(runs(2)["ddp"][0]) == held(runs(2)["ddp_view"][0]) + 4 * N


def test_carried_counts_each_kind():
    assert carried([("all_gather", 2e6), ("all_gather", 1e6), ("reduce_scatter", 3e6)]) == \
        "2 all_gather (3.00 MB), 1 reduce_scatter (3.00 MB)"


def test_paper_stages_1_and_2_send_an_all_reduce_and_stage_3_one_half_more():
    all_reduce = 2 * (4 - 1) / 4 * 4 * N
    assert paper_bytes(1, 4 * N, 4) == paper_bytes(2, 4 * N, 4) == all_reduce
    assert paper_bytes(3, 4 * N, 4) == 1.5 * all_reduce


def test_bytes_table_returns_what_each_strategy_sends(capsys):
    sent = bytes_table(runs(2), runs(4))
    assert sent[2]["ddp"] == 4 * N and sent[4]["zero1"] == 1.5 * 4 * N * 3 / 4 * 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "MB a rank sends per step (ring model, traced sizes)"
    assert not any("formula" in line for line in lines)


def test_choice_table_rows(capsys):
    rows = choice_table(runs(2))
    assert list(rows) == ["ddp", "ddp_view", "zero1", "zero1_view", "fsdp", "fsdp_no_reshard"]
    assert rows["ddp"]["sent"] == 1 and rows["zero1"]["sent"] == 1.5
    assert rows["fsdp_no_reshard"]["held_gathered"] == rows["fsdp_no_reshard"]["held"] + 4 * N
    assert rows["fsdp"]["held_gathered"] == rows["fsdp"]["held"] + 4 * N  # the two largest all-gathers
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["strategy", "MB", "held"] and lines[0].endswith("collectives/step  why")
    assert "gathered" not in lines[0]
    # each number ends under the end of its column's name
    ends = [lines[0].index(c) + len(c) for c in ("(2 ranks)", "state ×DDP", "sent ×DDP", "collectives/step")]
    ddp = lines[1]
    assert [ddp[end - 4:end] for end in ends] == ["0.02", "1.00", "1.00", "   1"]
    assert lines[-2] == ("rank 0 on 2 ranks; bytes sent in float32, by the ring model on the traced sizes "
                         "(nccl's ring algorithm; nccl may pick others)")
    assert lines[-1] == ("bytes sent ×DDP by the ring model, on the collectives gloo ran here: "
                         "fsdp 2.00, fsdp_no_reshard 1.50")
    assert "state sharded, no bucket copy" in out


def test_choice_table_adds_the_fastest_step_when_given(capsys):
    step_ms = {"ddp": 2.69, "ddp_view": 2.43, "zero1": 3.61, "zero1_view": 2.74, "fsdp": 15.4,
               "fsdp_no_reshard": 11.28}
    choice_table(runs(2), step_ms=step_ms)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("collectives/step  recorded step ms  why")
    end = lines[0].index("recorded step ms") + len("recorded step ms")
    assert lines[1][end - 3:end] == "2.7" and lines[5][end - 4:end] == "15.4"  # under its column's name
    assert lines[-3].endswith("live: every column but the recorded step, from this run")
    assert lines[-2].startswith("bytes sent ×DDP by the ring model, on the collectives gloo ran here: ")
    assert lines[-1].endswith("recorded earlier (file ddp_lib/demos/recorded/fsdp_step_times.json)")


def test_sizing_a_7b_model_on_8_gpus():
    rows = {(r["name"], r["stage"]): r for r in sizing()}
    gb = {key: r["at_peak"] / 1e9 for key, r in rows.items()}
    assert round(gb[("DDP, autocast", 0)], 1) == 168.0  # 16 + 4 (bucket copy) + 4 (Adam's step) bytes
    assert round(gb[("  with gradient_as_bucket_view", 0)], 1) == 140.0
    assert round(gb[("  with gradient_as_bucket_view", 1)], 1) == 77.0  # 9 bytes + 2 saved in backward
    assert round(gb[("FSDP2, MixedPrecisionPolicy", 3)], 1) == 17.5  # 2 bytes + Adam's 0.5
    assert round(rows[("FSDP2, MixedPrecisionPolicy", 3)]["after_backward"] / 1e9, 1) == 14.0


def test_memory_bars_add_the_bucket_copy_only_outside_the_buckets():
    bars = memory_bars({2: runs(2), 4: runs(4)})
    assert list(bars) == ["2 ranks", "4 ranks"]
    assert list(bars["2 ranks"]) == ["DDP", "DDP\nbucket view", "ZeRO-1", "FSDP2", "FSDP2\nno reshard"]
    assert bars["2 ranks"]["DDP"]["DDP's bucket copy"] == 4 * N
    assert bars["2 ranks"]["DDP\nbucket view"]["DDP's bucket copy"] == 0
    assert bars["4 ranks"]["FSDP2\nno reshard"]["activations"] == 100 + 4 * N


def test_seven_b_table_says_what_fits(capsys):
    rows = seven_b_table(7e9, 8)
    out = capsys.readouterr().out
    assert list(rows) == ["DDP, bucket view", "ZeRO-1, bucket view", "FSDP2", "FSDP2 no reshard"]
    assert out.splitlines()[0].endswith("GB per GPU, before activations") and "GB after backward" in out
    assert "does not fit in 80 GB" in out.splitlines()[1]
    assert "fits (estimate), 3.0 GB left for activations" in out.splitlines()[2]
    assert round(rows["FSDP2"]["at_peak"] / 1e9, 1) == 17.5


def test_print_hsdp_reads_each_rank(capsys):
    def rank(r, coord, shard, rep, shapes):
        return {"hsdp": {"rank": r, "coordinate": coord, "replicate_group": rep, "shard_group": shard,
                         "placements": ["R", "S(0)"], "local_shapes": shapes,
                         "collectives": {"c10d::all_gather_into_tensor_": 2}, "groups": {"all_gather": [shard]}}}
    job4 = [rank(0, (0, 0), [0, 1], [0, 2], [[4, 8], [4]]), rank(1, (0, 1), [0, 1], [1, 3], [[4, 8], [0]]),
            rank(2, (1, 0), [2, 3], [0, 2], [[4, 8], [4]]), rank(3, (1, 1), [2, 3], [1, 3], [[4, 8], [0]])]
    hsdp = print_hsdp(job4)
    out = capsys.readouterr().out.splitlines()
    assert [r["rank"] for r in hsdp] == [0, 1, 2, 3]
    assert out == [f"rank {r} at {c}: replicate group {rep}, shard group {sh}"
                   for r, c, rep, sh in ((0, (0, 0), [0, 2], [0, 1]), (1, (0, 1), [1, 3], [0, 1]),
                                         (2, (1, 0), [0, 2], [2, 3]), (3, (1, 1), [1, 3], [2, 3]))]
    assert hsdp_share(hsdp) == (36 + 32) / 2 / 68


def test_print_loop_parts_prints_rank_0(capsys):
    extras = {"clip": {"ddp_norm": 0.5, "fsdp_norm": 0.5, "norm_type": "DTensor", "norm_placements": ["Replicate()"],
                       "max_grad_diff": 0.0},
              "mixed": {"compute_dtype": "bfloat16", "output_dtype": "bfloat16", "param_dtype": "float32",
                        "grad_dtype": "float32", "output_rel_err": 0.004, "grad_rel_err": 0.07},
              "checkpointing": {"forward_bytes_checkpointed": 10, "forward_bytes": 30, "max_grad_diff": 0,
                                "sharded_grad_diff": 2e-6, "all_gathers": {"sharded_checkpointed": 9, "sharded": 9}},
              "order": {"optimizer_holds_model_params": False, "model_params_held": 0, "model_params": 10,
                        "model_changed": False}}
    print_loop_parts([{"extras": extras}, {"extras": {}}])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 13 and max(len(line) for line in out) <= 100  # short lines, one verdict each
    assert out[4].endswith("0.4%, below 1%: True; significant digits about 2")
    assert out[1] == "    clipped gradients equal within 1e-6: True"
    assert "gradients equal DDP's within 1e-6: False" in out[9]
    assert out[6] == "bfloat16 rounds each number by up to 0.4%"
    assert out[12] == "    its step changed the model: False"
    print_loop_parts([{"extras": extras}], parts=("order",))  # one part alone
    assert capsys.readouterr().out.splitlines() == out[11:]


def test_print_helpers_say_what_the_runs_show(capsys):
    two = runs(2)
    print_counted(two)
    assert print_formula_gap(two, 2) in (True, False)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ddp    rank 0 holds 0.014 MB of parameters, gradients and Adam's state"
    assert out[4] == "the formula for DDP: 1,000 parameters x 16 bytes = 0.016 MB"
    assert out[5].startswith("2 ranks, every strategy and rank: the largest gap from the ZeRO formula is ")


def test_precision_verdict_comes_out_both_ways():
    from ddp_lib.demos.beyond_tables import precision_verdict
    assert precision_verdict(0.004, 0.01) == "0.4%, below 1%: True; significant digits about 2"
    assert precision_verdict(0.07, 0.01) == "7.0%, below 1%: False; significant digits about 1"
    assert precision_verdict(0.0, 0.01) == "0.0%, below 1%: True; significant digits about all"


def test_relative_error_of_bfloat16():
    import torch

    from ddp_lib.workers.beyond_ddp import relative_error
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert relative_error(x, x) == 0
    assert 1e-3 < relative_error(x.bfloat16().float(), x) < 4e-3  # 8 significant bits: within 2**-8


# The lesson's launches, with real processes on gloo (a few seconds each).

def test_strategies_on_2_returns_every_strategy_asked():
    from ddp_lib.demos.beyond_tables import strategies_on_2
    runs2 = strategies_on_2("ddp,zero1_view")
    assert list(runs2) == ["ddp", "zero1_view"] and all(len(ranks) == 2 for ranks in runs2.values())
    assert runs2["zero1_view"][0]["layout"]["gradients_inside_buckets"]
    assert not runs2["ddp"][0]["layout"]["gradients_inside_buckets"]


def test_four_rank_job_returns_the_strategies_and_each_ranks_checks():
    from ddp_lib.demos.beyond_tables import four_rank_job
    runs4, job4 = four_rank_job("fsdp")
    assert list(runs4) == ["fsdp"] and len(runs4["fsdp"]) == 4
    assert [sorted(r) for r in job4] == [["hsdp", "seeded"]] * 4
    assert all(r["hsdp"]["groups"]["all_reduce"] == [r["hsdp"]["replicate_group"]] for r in job4)


def test_checkpoint_job_resumes_to_the_same_losses(tmp_path):
    from ddp_lib.demos.beyond_tables import checkpoint_job
    saved = checkpoint_job(str(tmp_path))
    assert sorted(saved[0]) == ["export", "loaded", "resumed", "straight", "zero_save"]
    straight, resumed = saved[0]["straight"], saved[0]["resumed"]
    assert resumed["losses"] == straight["losses"][2:] and resumed["checksum"] == straight["checksum"]


def test_loop_job_reproduces_the_optimizer_before_fully_shard():
    from ddp_lib.demos.beyond_tables import loop_job
    loop = loop_job()
    assert sorted(loop[0]) == ["accumulation", "extras", "meta"]
    order = loop[0]["extras"]["order"]
    assert not order["optimizer_holds_model_params"] and not order["model_changed"]


def test_bucket_copy_gone_needs_the_copy_under_ddp_none_with_the_view_and_equal_losses():
    def with_losses(strategy, inside, losses):
        r = result(strategy, [], 8 * N, inside=inside)[0] | {"losses": losses}
        return [r, dict(r)]  # two ranks
    runs2 = {"ddp": with_losses("ddp", False, [1.0, 0.5]), "ddp_view": with_losses("ddp_view", True, [1.0, 0.5])}
    assert bucket_copy_gone(runs2)
    assert not bucket_copy_gone(runs2 | {"ddp_view": with_losses("ddp_view", False, [1.0, 0.5])})
    assert not bucket_copy_gone(runs2 | {"ddp_view": with_losses("ddp_view", True, [1.0, 0.6])})


def test_hsdp_groups_match_each_kind_to_its_group():
    good = {"shard_group": [0, 1], "replicate_group": [0, 2],
            "groups": {"all_gather": [[0, 1]], "reduce_scatter": [[0, 1]], "all_reduce": [[0, 2]]}}
    assert hsdp_groups_match([good])
    swapped = good | {"groups": {"all_gather": [[0, 1]], "reduce_scatter": [[0, 2]], "all_reduce": [[0, 2]]}}
    assert not hsdp_groups_match([good, swapped])
