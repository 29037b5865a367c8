"""Lesson 02: a forkserver's children get the environment the server started with, not the
parent's environment now. ddp_lib's launcher hands each rank the parent's current environment."""

from __future__ import annotations

import os
from pathlib import Path


def read_variable(i: int, name: str, out_dir: str | None = None) -> str | None:
    """Return the environment variable ``name`` as process ``i`` finds it (None if unset); with
    ``out_dir``, also write it to ``out_dir/i.txt``, for a launcher that drops return values."""
    value = os.environ.get(name)
    if out_dir is not None:
        Path(out_dir, f"{i}.txt").write_text(repr(value))
    return value
