"""Lesson 05's checker on real ranks: two right answers written differently from the solution
pass; each mistake learners make is refused with its fix named."""

import pytest
from answer_files import load_answer

from ddp_lib.exercises.lesson05 import check_epoch_indices

HEAD = """
from torch.utils.data import DistributedSampler
from ddp_lib.workers.shared import make_moons

def epoch_indices(rank, world_size, epochs, seed):
"""
RIGHT = {
    "rank_from_the_process_group": """
    sampler = DistributedSampler(make_moons(), seed=seed)  # as the lesson writes it: rank and world size from the group
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out
""",
    "data_loader_batches": """
    from torch.utils.data import DataLoader
    positions = list(range(len(make_moons())))
    sampler = DistributedSampler(positions, world_size, rank, seed=seed)
    loader = DataLoader(positions, batch_size=10, sampler=sampler)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append([int(i) for batch in loader for i in batch])
    return out
""",
}
WRONG = {
    "joins_the_group_itself": ("""
    import torch.distributed as dist
    dist.init_process_group("gloo")  # the checker has joined the group already
    sampler = DistributedSampler(make_moons(), seed=seed)
    return [list(sampler) for _ in range(epochs)]
""", "raised ValueError: trying to initialize the default process group twice", "leave out init_process_group"),
    "epochs_from_one": ("""
    sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, seed=seed)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch + 1)
        out.append(list(sampler))
    return out
""", "order in epoch 0 is DistributedSampler's for epoch 1", "epochs count from 0"),
    "no_set_epoch": ("""
    sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, seed=seed)
    return [list(sampler) for _ in range(epochs)]
""", "reads the same order in epoch 1 as in epoch 0", "call sampler.set_epoch(epoch)"),
    "seed_per_rank": ("""
    sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, seed=seed + rank)
    return [list(sampler) for _ in range(epochs)]
""", "both read sample", "the same seed on every rank"),
}


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right05_{case}", HEAD + RIGHT[case], "epoch_indices")
    report = check_epoch_indices(answer)
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("case", sorted(WRONG))
def test_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, mistake, fix = WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong05_{case}", HEAD + body, "epoch_indices")
    report = check_epoch_indices(answer, plan=[(2, 3)], seed=7)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and mistake in fails[0] and fix in fails[0], str(report)


# Exercise 2: a prediction, checked by running the resumes.
def test_the_resume_prediction_is_judged_on_real_runs():
    from ddp_lib.exercises.lesson05 import check_resume_prediction

    report = check_resume_prediction(True, True, epochs=3, fail_at_epoch=2)  # 4 x 16 does not continue the run
    assert [line[:4] for line in report.lines] == ["PASS", "FAIL"] and not report.passed
    assert "the global batch becomes 64" in report.lines[1]


@pytest.mark.parametrize("predictions, verdicts", [
    ((True, False), ["PASS", "PASS"]),  # the right answer
    ((False, False), ["FAIL", "PASS"]),  # "another world size changes the run": not when the global batch stays
    ((True, True), ["PASS", "FAIL"]),  # "a resume always continues": not with a larger global batch
])
def test_each_prediction_gets_its_reason(predictions, verdicts):
    from ddp_lib.exercises.lesson05 import judge_resume

    lines = judge_resume(dict(zip(("matches_4x8", "matches_4x16"), predictions)),
                         {"matches_4x8": 1.8e-7, "matches_4x16": 0.29})
    assert [line[:4] for line in lines] == verdicts
    assert "global batch is still 32" in lines[0] and "global batch becomes 64" in lines[1]


def test_a_prediction_that_is_not_a_bool_is_refused_in_one_line():
    from ddp_lib.exercises.lesson05 import check_resume_prediction

    with pytest.raises(ValueError, match=r"matches_4x8='yes': pass True"):
        check_resume_prediction("yes", False)


# Exercise 3: whose data the checkpoint's batch-norm statistics describe.
@pytest.mark.parametrize("batch, without_sync, sync", [("rank 0", "rank 0", "all ranks"),
                                                       ("Rank 0's data", "rank0", "the global batch")])
def test_right_batchnorm_answers_pass_however_written(batch, without_sync, sync):
    from ddp_lib.exercises.lesson05 import check_batchnorm_prediction

    report = check_batchnorm_prediction(batch=batch, batch_without_sync=without_sync, sync=sync)
    assert report.passed and len(report.lines) == 3, str(report)


@pytest.mark.parametrize("batch, without_sync, sync, fix", [
    ("all ranks", "rank 0", "all ranks", "DDP averages gradients, not buffers"),  # buffers averaged like gradients
    ("each rank", "rank 0", "all ranks", "only rank 0 saves"),  # each rank keeps its own
    ("rank 0", "all ranks", "all ranks", "turning the copy off averages nothing"),  # no copy taken for an average
    ("rank 0", "each rank", "all ranks", "but only rank 0 saves"),  # each rank's own, but one file
    ("rank 0", "rank 0", "rank 0", "every rank's running statistics come from the global batch"),  # the broadcast wins
    ("rank 0", "rank 0", "each rank", "no rank keeps statistics of its own batches"),
])
def test_batchnorm_mistakes_are_named_with_their_fix(batch, without_sync, sync, fix):
    from ddp_lib.exercises.lesson05 import check_batchnorm_prediction

    report = check_batchnorm_prediction(batch=batch, batch_without_sync=without_sync, sync=sync)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fix in fails[0], str(report)


def test_a_batchnorm_answer_outside_the_choices_is_refused_in_one_line():
    from ddp_lib.exercises.lesson05 import check_batchnorm_prediction

    with pytest.raises(ValueError, match=r"batch='the model': pass 'rank 0' or 'all ranks'"):
        check_batchnorm_prediction(batch="the model", batch_without_sync="rank 0", sync="all ranks")


# Exercise 5: the metric split. Plain functions: the checker starts no process.
def metric_blocks(rank, world_size, n):  # contiguous blocks, written differently from range(rank, n, world_size)
    size = -(-n // world_size)
    return list(range(rank * size, min(n, (rank + 1) * size)))


@pytest.mark.parametrize("fn", [lambda rank, world_size, n: range(rank, n, world_size), metric_blocks,
                                lambda rank, world_size, n: __import__("torch").arange(n)[rank::world_size]])
def test_metric_split_right_answers_pass(fn):
    from ddp_lib.exercises.lesson05 import check_metric_split

    report = check_metric_split(fn)
    assert report.passed, str(report)


def metric_padded(rank, world_size, n):
    from torch.utils.data import DistributedSampler
    return list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))


def metric_stub(rank, world_size, n):
    raise NotImplementedError("write metric_indices")


@pytest.mark.parametrize("fn, says", [
    (metric_padded, "DistributedSampler pads this way"),
    (lambda rank, world_size, n: range(rank * (n // world_size), (rank + 1) * (n // world_size)),
     "drops the remainder"),
    (lambda rank, world_size, n: range(n), "every rank reads all 201 samples"),
    (lambda rank, world_size, n: range(rank, n + 1, world_size), "numbered 0 to 200"),
    (lambda rank, world_size, n: None, "expected a list (or range)"),
    (metric_stub, "raised NotImplementedError: write metric_indices"),
])
def test_metric_split_mistakes_name_the_fix(fn, says):
    from ddp_lib.exercises.lesson05 import check_metric_split

    report = check_metric_split(fn)
    assert not report.passed and says in str(report), str(report)


def test_metric_split_names_the_first_sample_no_rank_reads():
    from ddp_lib.exercises.lesson05 import check_metric_split

    def blocks(rank, world_size, n):  # n // world_size samples per rank: the remainder is never read
        return range(rank * (n // world_size), (rank + 1) * (n // world_size))

    report = check_metric_split(blocks)
    assert "read by no rank; the first is sample 200." in str(report), str(report)
