import ast
from pathlib import Path

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


def _source_calls(notebook):
    """Each ``source_lines(...)`` / ``source_text(...)`` call in ``notebook``'s code cells, with a namespace
    holding the notebook's imports from ddp_lib and torch (IPython magics left out)."""
    import nbformat

    cells = [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    trees = [ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
             for source in cells]
    namespace: dict = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("ddp_lib", "torch")) or (
                    isinstance(node, ast.Import) and node.names[0].name.startswith(("ddp_lib", "torch"))):
                exec(compile(ast.Module([node], type_ignores=[]), str(notebook), "exec"), namespace)
    return [(node, namespace) for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("source_lines", "source_text")]


LESSONS_SHOWING_SOURCE = sorted(
    path for path in (Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]*_*.ipynb")
    if "source_lines(" in path.read_text(encoding="utf-8") or "source_text(" in path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("notebook", LESSONS_SHOWING_SOURCE, ids=lambda p: p.stem)
def test_every_excerpt_a_lesson_shows_is_still_in_the_function(notebook):
    """A lesson's excerpt names its first and last lines; a change to the function that drops either
    breaks the lesson's cell, found here without running the lesson."""
    from ddp_lib.demos.source_lines import source_text

    calls = _source_calls(notebook)
    assert calls, f"{notebook.name} shows no excerpt"
    for call, namespace in calls:
        function = eval(compile(ast.Expression(call.args[0]), notebook.name, "eval"), namespace)
        first, last = (ast.literal_eval(arg) for arg in call.args[1:3])
        assert source_text(function, first, last).strip(), (notebook.name, first, last)

