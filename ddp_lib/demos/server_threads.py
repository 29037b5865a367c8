"""Lesson 02: count the forkserver's threads, and a rank's before and after its first computation
(Linux only: it reads ``/proc``)."""

from __future__ import annotations

import multiprocessing
import os

import torch


def _threads(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/task"))  # one entry per thread of the process


def _count_in_child(answer) -> None:
    server = _threads(os.getppid())  # a forkserver's child is forked by the server itself
    started = _threads()
    torch.set_num_threads(2)
    torch.ones(512, 512) @ torch.ones(512, 512)
    answer.put({"forkserver": server, "rank, just started": started, "rank, after a matrix multiply": _threads()})


def forkserver_thread_counts() -> dict[str, int]:
    """Threads of the running forkserver, and of one process it starts: at once, then after a
    matrix multiply on 2 threads."""
    ctx = multiprocessing.get_context("forkserver")
    answer = ctx.SimpleQueue()
    child = ctx.Process(target=_count_in_child, args=(answer,))
    child.start()
    counts = answer.get()
    child.join()
    return counts
