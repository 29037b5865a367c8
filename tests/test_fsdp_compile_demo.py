"""Lesson 10's count of torch.compile's graphs with FSDP2: compiling the whole model gives up on the
root's forward and compiles each block's forward alone, as compiling each block does."""

from ddp_lib.demos import fsdp_compile
from ddp_lib.launch import run_ranks


def test_the_whole_model_compiles_block_by_block_like_the_per_block_recipe():
    results = run_ranks(fsdp_compile.compiled_graphs, 2, show_output=False)
    for r in results:
        assert r["frames_given_up"] == {"torch.compile(model)": 1, "each block compiled": 0}
        assert r["graphs"]["torch.compile(model)"] == r["graphs"]["each block compiled"] == 2
        assert r["losses"]["torch.compile(model)"] == r["losses"]["each block compiled"]
    kept = fsdp_compile.kept_run()
    assert [{k: r[k] for k in ("graphs", "frames_given_up")} for r in kept["ranks"]] == \
        [{k: r[k] for k in ("graphs", "frames_given_up")} for r in results]
