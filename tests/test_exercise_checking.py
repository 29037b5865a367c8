"""The shared pieces of the exercise checkers, through the example checker that
docs/contributing.md shows a teacher: the block is run as written, on real ranks."""

import re
from pathlib import Path

import pytest
from answer_files import load_answer

DOC = Path(__file__).resolve().parents[1] / "docs" / "contributing.md"


@pytest.fixture
def example(tmp_path, monkeypatch):
    """The example checker's module, written from the docs' code block (the ranks import it)."""
    text = DOC.read_text()
    start = text.index("A new checker, for a worker `max_across_ranks")
    code = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    return load_answer(tmp_path, monkeypatch, "example_checker", code, "check_max_across_ranks")


def test_the_documented_example_checker_passes_a_right_answer_and_names_a_mistake(example, tmp_path, monkeypatch):
    head = ("import torch\nimport torch.distributed as dist\nfrom ddp_lib.process_group import process_group\n\n"
            "def max_across_ranks(rank, world_size, x):\n")
    right = load_answer(tmp_path, monkeypatch, "max_right", head + """\
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t)
""", "max_across_ranks")
    own = load_answer(tmp_path, monkeypatch, "max_own", head + "    return x\n", "max_across_ranks")
    report = example(right)
    assert report.passed and len(report.lines) == 2, str(report)
    (line,) = example(own, world_sizes=(2,)).lines
    assert line.startswith("FAIL world_size 2: no collective ran") and "op=ReduceOp.MAX" in line, line


def test_a_hang_where_no_rank_said_where_it_was_blames_nothing_it_cannot_see():
    from ddp_lib.errors import LaunchTimeout
    from ddp_lib.exercises.checking import hang_report

    # A rank busy in C code that holds Python's lock writes no stack: no frames for either rank.
    said = hang_report(LaunchTimeout(5, [0, 1]))
    assert said == (". No rank said where it was: does the work take longer than the deadline? "
                    "Does every rank call the same collectives, in the same order?")
