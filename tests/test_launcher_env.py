"""Lesson 00: which variables each launcher's ranks find. Real processes: ddp_lib.mp.labelled_spawn, and
torch's start_processes with fork (the launcher code torch's mp.spawn runs)."""

from __future__ import annotations

import os

import torch
import torch.multiprocessing as mp

import ddp_lib.mp
from ddp_lib.demos.launcher_env import LAUNCHER_VARS, launcher_table, launcher_view, launcher_view_with_fix
from ddp_lib.process_group import threads_per_rank, usable_cores


def _torch_views(world_size: int, worker=launcher_view) -> list[dict]:
    # fork, so that the children start from this process's environment as it is now: a forkserver
    # started earlier in the session would hand them the environment it was started with.
    results = mp.get_context("fork").SimpleQueue()
    mp.start_processes(worker, args=(world_size, results), nprocs=world_size, join=True,
                       start_method="fork")
    return [view for _, view in sorted(results.get() for _ in range(world_size))]


def test_torch_sets_none_and_ddp_lib_sets_the_rank_variables(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    ddp_views = ddp_lib.mp.labelled_spawn(launcher_view, args=(2,), nprocs=2, join=True)
    torch_views = _torch_views(2)
    parent = {name: os.environ.get(name) for name in LAUNCHER_VARS}
    assert all(view["env"] == {name: parent[name] for name in LAUNCHER_VARS} for view in torch_views)
    assert [view["env"]["RANK"] for view in ddp_views] == ["0", "1"]
    assert all(view["env"]["WORLD_SIZE"] == "2" and view["env"]["TORCH_DIST_INIT_BARRIER"] == "1"
               and view["env"]["MASTER_PORT"] is None for view in ddp_views)
    assert [view["threads"] for view in ddp_views] == [threads_per_rank(2)] * 2
    assert [view["threads"] for view in torch_views] == [torch.get_num_threads()] * 2

    table = launcher_table({"torch's launcher": torch_views, "ddp_lib.mp.labelled_spawn": ddp_views}).splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    assert rows["RANK"] == ["-", "0,", "1"] and rows["MASTER_ADDR"] == ["-", "-"]
    assert rows["OMP_NUM_THREADS"] == ["-", "set"]


def test_a_variable_the_parent_has_shows_as_unset():
    views = [{"env": {name: None for name in LAUNCHER_VARS} | {"RANK": "3"}, "threads": 1}]
    rows = launcher_table({"x": views}, parent_env={"RANK": "3"}).splitlines()
    assert rows[1].split() == ["RANK", "-"]


def test_a_long_launcher_name_keeps_a_gap_to_the_next_column():
    views = [{"env": {name: None for name in LAUNCHER_VARS} | {"RANK": "0"}, "threads": 1}]
    header = launcher_table({"ddp_lib.mp.labelled_spawn": views, "torchrun": views}, parent_env={}).splitlines()[0]
    assert header.split() == ["ddp_lib.mp.labelled_spawn", "torchrun"]


def test_the_fix_gives_each_of_torchs_ranks_its_share_of_the_cores():
    for world_size in (2, 4):
        views = _torch_views(world_size, launcher_view_with_fix)
        fair_share = max(1, min(torch.get_num_threads(), usable_cores() // world_size))  # never above torch's default
        assert [view["threads"] for view in views] == [fair_share] * world_size
        # the count before the fix: torch's default, the same as this process's
        assert [view["default_threads"] for view in views] == [torch.get_num_threads()] * world_size


def test_the_fixed_worker_reports_both_counts_under_torchs_spawn():
    # the launch lesson 00 runs: torch's mp.spawn, each rank a fresh Python
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(launcher_view_with_fix, args=(2, results), nprocs=2, join=True)
    views = [view for _, view in sorted(results.get() for _ in range(2))]
    expected = [max(1, min(view["default_threads"], usable_cores() // 2)) for view in views]
    assert [view["threads"] for view in views] == expected
    assert all(view["default_threads"] >= 1 for view in views)
