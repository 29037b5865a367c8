import pytest

from ddp_lib.demos.source_lines import source_lines


def _example(x):
    if x:
        y = x + 1
        return y
    return 0


def test_the_lines_from_first_to_last_dedented_under_the_name():
    assert source_lines(_example, "y = x", "return y").data == "# from _example\ny = x + 1\nreturn y"


def test_a_missing_line_is_an_error():
    with pytest.raises(ValueError, match="no lines from"):
        source_lines(_example, "z = ", "return y")
