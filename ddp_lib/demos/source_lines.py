"""The few lines of a function's source behind a verdict a lesson prints, shown beside it.

    display(source_lines(batch_scaling.summarize_lr_scaling, "gaps = {k:", '"near": sum('))
"""

from __future__ import annotations

import inspect
from collections.abc import Callable


def source_text(function: Callable, first: str, last: str) -> str:
    """``function``'s source from the line starting with ``first`` to the next line starting with
    ``last`` (leading spaces ignored), dedented. ValueError if either line is not there."""
    lines = inspect.getsource(function).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith(first)), None)
    end = next((i for i in range(start or 0, len(lines)) if lines[i].strip().startswith(last)), None)
    if start is None or end is None:
        raise ValueError(f"{function.__qualname__} has no lines from {first!r} to {last!r}")
    shown = lines[start:end + 1]
    indent = min(len(line) - len(line.lstrip()) for line in shown if line.strip())
    return "\n".join(line[indent:] for line in shown)


def source_lines(function: Callable, first: str, last: str):
    """:func:`source_text` as a highlighted ``IPython.display.Code``, under a comment naming the function."""
    from IPython.display import Code

    return Code(f"# from {function.__qualname__}\n{source_text(function, first, last)}", language="python")
