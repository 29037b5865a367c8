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


def test_lesson04_shows_the_no_sync_loop_with_the_forward_inside_and_outside():
    from ddp_lib.demos.source_lines import source_text
    from ddp_lib.workers import gradients

    shown = source_text(gradients.no_sync_run, "if forward_inside", "loss.backward()  #").splitlines()
    assert shown[0] == "if forward_inside_no_sync:"
    assert any(line.startswith("else:") for line in shown)
    assert [line.strip() for line in shown].count("loss.backward()") == 1  # the inside branch's
    assert shown[-1].strip().startswith("loss.backward()  # all-reduces")
