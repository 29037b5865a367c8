"""Lesson 02: setting OMP_NUM_THREADS in a rank forked from the forkserver changes nothing."""

import torch
import torch.multiprocessing as mp

from ddp_lib.demos.omp_in_rank import threads_after_setting
from ddp_lib.forkserver import start_forkserver


def test_the_variable_set_in_a_forked_rank_changes_nothing(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    start_forkserver()
    results = mp.get_context("forkserver").SimpleQueue()
    mp.start_processes(threads_after_setting, args=(results,), nprocs=1, start_method="forkserver")
    _, after_setting, after_computing = results.get()
    assert after_setting == after_computing == torch.get_num_threads()
