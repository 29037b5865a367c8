"""Lesson 10's exercises 2 to 4 checkers, on one process: predictions for SGD, resharding to 2, a resume on 4."""

import pytest

from ddp_lib.exercises import lesson10

SGD_RIGHT = {"state": 0, "ddp": 3_161_100, "zero1": 3_161_100, "fsdp": 1_054_728}


def test_sgd_two_right_answers_pass():
    n = sum(p.numel() for p in lesson10.make_deep_mlp().parameters())
    otherwise = {"state": 0, "ddp": 3 * n * 4, "zero1": 3 * n * 4, "fsdp": n * 4}  # half of each tensor: within 2%
    for predicted in (SGD_RIGHT, otherwise):
        report = lesson10.check_sgd_prediction(predicted)
        assert report.passed, str(report)


def test_sgd_right_answer_names_the_computed_bytes():
    report = lesson10.check_sgd_prediction(SGD_RIGHT)
    assert any(f"the sizes give {SGD_RIGHT['fsdp']:,}" in line for line in report.lines), str(report)


def test_sgd_stub_fails_once():
    report = lesson10.check_sgd_prediction({"state": None, "ddp": None, "zero1": None, "fsdp": None})
    assert len(report.lines) == 1 and "FAIL predicted_sgd must give an int" in report.lines[0], str(report)


@pytest.mark.parametrize(("key", "value", "named"), [
    ("state", 1_053_700, "momentum_buffer"),
    ("state", 2_107_440, "plain SGD stores nothing"),
    ("ddp", 2_107_400, "bucket copy"),
    ("ddp", 4_214_800, "plain SGD has none"),
    ("zero1", 1_580_550, "shards only the optimizer state"),
    ("zero1", 2_107_400, "wraps the optimizer, not the model"),
    ("fsdp", 1_582_092, "FSDP2 has no DDP bucket"),
    ("fsdp", 2_107_400, "rank 0 holds about half"),
    ("fsdp", 100, "too low"),
    ("ddp", 3_161_100 + 82_048, "grey part"),  # the bars' activations added: 2.6 % high
    ("fsdp", 1_054_728 + 82_048, "grey part"),
])
def test_sgd_mistakes_are_named(key, value, named):
    report = lesson10.check_sgd_prediction({**SGD_RIGHT, key: value})
    assert not report.passed and sum(line.startswith("FAIL") for line in report.lines) == 1, str(report)
    assert named in str(report), str(report)


def test_reshard_right_answers_pass():
    for predicted in ({"all_gathers": 10, "forward": "between"}, dict(forward="between", all_gathers=2 * 5)):
        assert lesson10.check_reshard_prediction(predicted).passed


@pytest.mark.parametrize(("predicted", "named"), [
    ({"all_gathers": None, "forward": None}, "must give 'all_gathers' an int"),
    ({"all_gathers": 5, "forward": "between"}, "5 is False's count"),
    ({"all_gathers": 20, "forward": "between"}, "one all-gather per layer (5) in forward"),
    ({"all_gathers": 10, "forward": "like True"}, "more than True's quarter"),
    ({"all_gathers": 10, "forward": "like False"}, "less than False's full weight"),
])
def test_reshard_mistakes_are_named(predicted, named):
    report = lesson10.check_reshard_prediction(predicted)
    assert not report.passed and named in str(report), str(report)


def test_reshard_run_shows_the_answer(capsys):
    """Real processes: 5 all-gathers over the 4 ranks in forward, then 5 within groups of 2 in backward."""
    sizes = lesson10.show_reshard(4, 2)
    assert sizes == [4] * 5 + [2] * 5
    assert "10 all-gathers" in capsys.readouterr().out


def test_resume():
    assert lesson10.check_resume_prediction(False).passed
    assert lesson10.check_resume_prediction(1 == 2).passed  # the same answer, computed
    assert "32 samples" in str(lesson10.check_resume_prediction(True))
    assert "must be True or False" in str(lesson10.check_resume_prediction(None))
    assert "must be True or False" in str(lesson10.check_resume_prediction("no"))
