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


def _learner(tmp_path, monkeypatch, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return importlib.import_module(name).evaluate


# The metrics exchanged through files; beside it a real all-reduce of many candidate values, in the
# hope that every rank's metric is among them.
CANDIDATES_BESIDE_FILES = """
    import glob, os, time
    import torch, torch.distributed as dist
    from ddp_lib.process_group import process_group

    def evaluate(rank, world_size, metric):
        with process_group(rank, world_size):
            dist.all_reduce(torch.linspace(0.01, 0.99, {count}, dtype=torch.float64))
            folder = f"{{os.environ['TMPDIR_FOR_TEST']}}/{{os.environ['MASTER_PORT']}}"
            os.makedirs(folder, exist_ok=True)
            with open(f"{{folder}}/{{rank}}.tmp", "w") as f:
                f.write(repr(metric))
            os.rename(f"{{folder}}/{{rank}}.tmp", f"{{folder}}/{{rank}}")
            while len(glob.glob(f"{{folder}}/[0-9]*")) < world_size:
                time.sleep(0.01)
            return sum(float(open(f"{{folder}}/{{r}}").read()) for r in range(world_size)) / world_size
    """


@pytest.mark.parametrize("count, refusal", [(99, "did not go into one"), (20_000, "values; the mean of one metric")])
def test_checker_refuses_candidate_values_beside_metrics_swapped_through_files(tmp_path, monkeypatch, count, refusal):
    monkeypatch.setenv("TMPDIR_FOR_TEST", str(tmp_path))
    evaluate = _learner(tmp_path, monkeypatch, f"candidates{count}", CANDIDATES_BESIDE_FILES.format(count=count))
    (line,) = check_evaluation(evaluate, world_sizes=(2,)).lines
    assert line.startswith("FAIL") and refusal in line, line


# The checker's own names rebound from inside the rank, then a barrier (no data) and files.
CHECKER_REBOUND_IN_THE_RANK = """
    import torch.distributed as dist
    import ddp_lib.exercises.lesson07 as checker
    from ddp_lib.process_group import process_group

    def evaluate(rank, world_size, metric):
        checker._carries = lambda *args: True
        checker.COMBINING = ("barrier",)
        with process_group(rank, world_size):
            dist.barrier()
            return metric
    """


def test_checker_names_rebound_in_the_rank_change_nothing(tmp_path, monkeypatch):
    evaluate = _learner(tmp_path, monkeypatch, "rebound07", CHECKER_REBOUND_IN_THE_RANK)
    (line,) = check_evaluation(evaluate, world_sizes=(2,)).lines
    assert line.startswith("FAIL") and "ran no collective" in line, line


@pytest.mark.parametrize("sent", ["torch.tensor(metric, dtype=torch.float64)", "repr(metric)"])
def test_checker_passes_a_metric_gathered_as_a_tensor_or_as_text(tmp_path, monkeypatch, sent):
    evaluate = _learner(tmp_path, monkeypatch, f"gathered{len(sent)}", f"""
        import torch
        import torch.distributed as dist
        from ddp_lib.process_group import process_group

        def evaluate(rank, world_size, metric):
            with process_group(rank, world_size):
                gathered = [None] * world_size
                dist.all_gather_object(gathered, {sent})
                return sum(float(m) for m in gathered) / world_size
        """)
    report = check_evaluation(evaluate, world_sizes=(2,))
    assert report.passed, report
