"""Lesson 02: ``OMP_NUM_THREADS`` set inside a rank forked from a forkserver that imported torch."""

from __future__ import annotations

import os

import torch


def threads_after_setting(i: int, results) -> None:
    """Set ``OMP_NUM_THREADS=1`` first, then put ``(i, threads then, threads after a computation)`` in
    ``results``. Nothing reads the count before the variable is set, so neither count can come from
    an earlier read in this process: if both differ from 1, OpenMP read the variable before, at import."""
    os.environ["OMP_NUM_THREADS"] = "1"  # too late: OpenMP read it when the forkserver imported torch
    after_setting = torch.get_num_threads()
    matrix = torch.randn(256, 256)
    matrix @ matrix  # the first computation: the pool of threads starts here
    results.put((i, after_setting, torch.get_num_threads()))
