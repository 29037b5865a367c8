"""Lesson 02: ``OMP_NUM_THREADS`` set inside a rank forked from a forkserver that imported torch."""

from __future__ import annotations

import os

import torch


def threads_after_setting(i: int, results) -> None:
    """Put ``(i, threads before, threads after)`` in ``results``: "after" is once this process has set
    ``OMP_NUM_THREADS=1`` and then multiplied two matrices, its first computation."""
    before = torch.get_num_threads()
    os.environ["OMP_NUM_THREADS"] = "1"  # too late: OpenMP read it when the forkserver imported torch
    matrix = torch.randn(256, 256)
    matrix @ matrix
    results.put((i, before, torch.get_num_threads()))
