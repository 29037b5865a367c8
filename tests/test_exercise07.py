"""Lesson 07's checker refuses metrics swapped through the store when the checker's records of
collective inputs are forged, and the one forgery it cannot refuse, kept as a strict xfail (the rest
of its tests are in test_failure_lab.py)."""

import importlib
import textwrap

import pytest

from ddp_lib.exercises.lesson07 import check_evaluation

# The metrics through the group's store; an all-reduce of zeros of the same shape and dtype as the
# metric, then a record saying the metric went into that all-reduce, added to the checker's records
# found through gc. Two records then claim one all-reduce: neither can be trusted, both are dropped.
FORGED_BESIDE_A_SAME_SHAPED_ALL_REDUCE = """
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d
    from forged_collectives import forge_inputs
    from ddp_lib.process_group import process_group

    def evaluate(rank, world_size, metric):
        with process_group(rank, world_size):
            store = distributed_c10d._get_default_store()
            store.set(f"metric{rank}", repr(metric))
            dist.all_reduce(torch.zeros(1))
            assert forge_inputs("c10d::allreduce_", [torch.tensor([metric])])
            return sum(float(store.get(f"metric{r}")) for r in range(world_size)) / world_size
    """


def test_checker_refuses_a_forged_record_beside_a_real_all_reduce_of_the_same_shape(tmp_path, monkeypatch):
    (tmp_path / "forged07.py").write_text(textwrap.dedent(FORGED_BESIDE_A_SAME_SHAPED_ALL_REDUCE))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    (line,) = check_evaluation(importlib.import_module("forged07").evaluate, world_sizes=(2,)).lines
    assert line.startswith("FAIL") and "did not go into one" in line, line


# What the checkers cannot refuse (see watching_collectives): a real all-reduce of zeros of the
# metric's shape, whose whole record is then swapped for one that says it carried the metric.
REWRITTEN_AFTER_A_SAME_SHAPED_ALL_REDUCE = FORGED_BESIDE_A_SAME_SHAPED_ALL_REDUCE.replace(
    "forge_inputs(\"c10d::allreduce_\", [torch.tensor([metric])])",
    "rewrite_inputs(\"c10d::allreduce_\", [metric])").replace("import forge_inputs", "import rewrite_inputs")


@pytest.mark.xfail(strict=True, reason="a real collective's record, swapped whole in the rank, is believed")
def test_known_limit_a_real_collectives_record_rewritten(tmp_path, monkeypatch):
    (tmp_path / "rewritten07.py").write_text(textwrap.dedent(REWRITTEN_AFTER_A_SAME_SHAPED_ALL_REDUCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    report = check_evaluation(importlib.import_module("rewritten07").evaluate, world_sizes=(2,))
    assert not report.passed, str(report)
