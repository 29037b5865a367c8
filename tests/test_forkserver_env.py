"""Lesson 02: a forkserver child finds the environment the server started with; ddp_lib's ranks
find the parent's environment at the launch. Real processes."""

import ast
import os

import torch.multiprocessing as mp

import ddp_lib.mp
from ddp_lib.demos.forkserver_env import read_variable
from ddp_lib.forkserver import start_forkserver


def test_a_variable_set_after_the_server_started_reaches_only_ddp_lib_ranks(tmp_path, monkeypatch):
    start_forkserver()
    mp.start_processes(read_variable, args=("PATH", str(tmp_path)), nprocs=1, start_method="forkserver")
    monkeypatch.setenv("DDP_LIB_TEST_SET_LATE", "late")
    mp.start_processes(read_variable, args=("DDP_LIB_TEST_SET_LATE", str(tmp_path)), nprocs=1,
                       start_method="forkserver")
    assert ast.literal_eval((tmp_path / "0.txt").read_text()) is None
    assert ddp_lib.mp.labelled_spawn(read_variable, args=("DDP_LIB_TEST_SET_LATE",), nprocs=2) == ["late", "late"]
    assert os.environ["DDP_LIB_TEST_SET_LATE"] == "late"
