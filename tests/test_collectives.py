"""Lesson 01's workers on real gloo process groups: init methods, the store, every collective,
point-to-point (including the deadlock of two blocking sends), subgroups and the plots."""


import pytest

from ddp_lib.launch import run_ranks
from ddp_lib.workers import collectives, point_to_point


def start(rank, world_size):
    return [10.0 * rank + j for j in range(1, world_size + 1)]


def expected(name, world_size):
    """What each rank should hold after ``name``, computed without torch.distributed."""
    starts = [start(r, world_size) for r in range(world_size)]
    sums = [sum(column) for column in zip(*starts)]
    everything = [v for s in starts for v in s]
    return {
        "broadcast": [starts[0]] * world_size,
        "all_reduce": [sums] * world_size,
        "reduce": [sums] + [None] * (world_size - 1),  # None: undefined there
        "all_gather": [everything] * world_size,
        "gather": [everything] + [None] * (world_size - 1),
        "scatter": [[starts[0][r]] for r in range(world_size)],
        "reduce_scatter": [[sums[r]] for r in range(world_size)],
        "all_to_all": [[starts[q][r] for q in range(world_size)] for r in range(world_size)],
    }[name]


@pytest.mark.parametrize("method", ["env", "tcp", "file"])
def test_init_methods_form_the_same_group(method, tmp_path):
    results = run_ranks(collectives.whoami, 3, (method, str(tmp_path / "store")))
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert {r["world_size"] for r in results} == {3}
    assert {r["backend"] for r in results} == {"gloo"}
    assert {r["store"] for r in results} == {"FileStore" if method == "file" else "TCPStore"}
    assert {r["sum_of_ranks"] for r in results} == {3.0}


def test_the_plain_torch_worker_joins_and_sums_the_ranks():
    results = run_ranks(collectives.join_and_sum, 3)
    assert [(r["rank"], r["world_size"], r["backend"], r["sum_of_ranks"]) for r in results] == [
        (0, 3, "gloo", 3.0), (1, 3, "gloo", 3.0), (2, 3, "gloo", 3.0)]


def test_the_plain_torch_worker_reports_through_a_queue_under_torchs_spawn(monkeypatch):
    import torch.multiprocessing as mp

    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    queue = mp.get_context("spawn").SimpleQueue()
    assert mp.spawn(collectives.join_and_put, args=(2, queue), nprocs=2) is None  # torch drops return values
    results = sorted((queue.get() for _ in range(2)), key=lambda r: r["rank"])
    assert [(r["rank"], r["world_size"], r["sum_of_ranks"]) for r in results] == [(0, 2, 1.0), (1, 2, 1.0)]


def test_joining_with_no_rank_works_under_labelled_spawn_and_fails_under_torchs_spawn(monkeypatch):
    import torch.multiprocessing as mp

    import ddp_lib.mp
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert ddp_lib.mp.labelled_spawn(collectives.join_from_env, args=(2,), nprocs=2) == [1.0, 1.0]
    with pytest.raises(mp.ProcessRaisedException, match="environment variable RANK expected, but not set"):
        mp.spawn(collectives.join_from_env, args=(2,), nprocs=2)


def test_the_plain_torch_broadcast_gives_every_rank_rank_0s_tensor():
    results = run_ranks(collectives.broadcast_from_0, 3)
    assert [r["before"] for r in results] == [start(r, 3) for r in range(3)]
    assert [r["after"] for r in results] == expected("broadcast", 3)
    assert collectives.describe(results).splitlines()[0] == "broadcast"  # the lesson prints and plots it


@pytest.mark.parametrize("method", ["env", "tcp", "file"])
def test_the_plain_worker_joins_through_each_init_method(method, tmp_path, monkeypatch):
    import ddp_lib.mp
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    url = collectives.init_method_url(method, str(tmp_path / "store"))
    assert ddp_lib.mp.labelled_spawn(collectives.join_with_url, args=(3, url), nprocs=3) == [3.0, 3.0, 3.0]


def test_the_launcher_serves_the_store_and_under_torchs_convention_rank_0_does(monkeypatch):
    # Each rank looks for the process listening on MASTER_PORT while every rank is still in the group
    # (the worker waits at a barrier after its look). Without it, under mp.spawn a rank 0 that looked
    # first and left closed the store it serves, and a slower rank 1 found nobody (store_pid None).
    import os

    import ddp_lib.mp
    from ddp_lib.demos.store_server import who_serves_the_store
    from ddp_lib.process_group import free_port

    under_launcher = run_ranks(who_serves_the_store, 2)
    assert {r["store_pid"] for r in under_launcher} == {os.getpid()}
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    under_torch = ddp_lib.mp.labelled_spawn(who_serves_the_store, args=(2,), nprocs=2)
    rank0_pid = next(r["pid"] for r in under_torch if r["rank"] == 0)
    assert {r["store_pid"] for r in under_torch} == {rank0_pid} and rank0_pid != os.getpid()


def test_file_init_method_needs_a_path():
    with pytest.raises(ValueError, match="needs a path"):
        collectives.init_method_url("file")


def test_store_by_hand_then_process_group(tmp_path):
    results = run_ranks(collectives.store_demo, 3, (str(tmp_path / "store"),))
    for r in results:
        assert r["seen"] == ["rank 0 is here", "rank 1 is here", "rank 2 is here"]
        assert r["arrival_in_range"] and r["sum_of_ranks"] == 3.0
    assert sorted(r["arrival"] for r in results) == [1, 2, 3]  # add() numbers the arrivals 1..3
    # init_process_group left one key per rank in the store, named after the rank, the same for every rank
    keys = results[0]["group_keys"]
    assert len(keys) == 3 and [key.rsplit("/", 1)[1] for key in keys] == ["0", "1", "2"]
    assert all(r["group_keys"] == keys and all(key.startswith("0/") for key in keys) for r in results)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_every_collective_before_and_after(world_size):
    per_rank = run_ranks(collectives.run_collectives, world_size)
    for name in collectives.COLLECTIVES:
        check_collective(name, [r[name] for r in per_rank], world_size)


def test_one_collective_and_a_wrong_name():
    check_collective("all_to_all", run_ranks(collectives.run_collective, 3, ("all_to_all",)), 3)
    with pytest.raises(ValueError, match="unknown collective 'allreduce'; accepted: broadcast"):
        collectives.run_collectives(0, 1, ("allreduce",))


def check_collective(name, results, world_size):
    for rank, (r, want) in enumerate(zip(results, expected(name, world_size))):
        assert r["rank"] == rank and r["name"] == name
        assert r["before"] == (None if name == "scatter" and rank else start(rank, world_size))
        if name == "reduce":
            assert r["defined"] == (rank == 0)
        if want is not None:
            assert r["after"] == want
        elif name == "gather":
            assert r["after"] is None


def test_describe_prints_ranks_in_order():
    text = collectives.describe(run_ranks(collectives.run_collective, 2, ("reduce",)))
    lines = text.splitlines()
    assert lines[:2] == ["reduce", "  rank 0: [1, 2]               -> [12, 14]"]
    assert lines[2].startswith("  rank 1: [11, 12]             -> [")
    assert lines[2].endswith("(scratch space: do not read)")


def test_barrier_releases_nobody_before_the_last_arrival():
    results = run_ranks(collectives.barrier_timeline, 3, (0.1,))
    last_arrival = max(r["arrived"] for r in results)
    assert last_arrival - min(r["arrived"] for r in results) > 0.15  # the delays happened
    assert all(r["left"] >= last_arrival for r in results)


def test_barrier_timeline_broadcast_lets_rank_0_leave_before_the_late_rank_arrives():
    results = run_ranks(collectives.barrier_timeline, 4, (0.1, True))
    assert all(r["left"] >= max(q["arrived"] for q in results) for r in results)  # the barrier still waits
    # broadcast from rank 0: rank 0 sends to ranks 1 and 2 only, so it need not wait for rank 3
    assert results[0]["broadcast_left"] < results[-1]["broadcast_arrived"]
    # rank 1 sends to rank 3 in gloo's tree, so it waits for it
    assert results[1]["broadcast_left"] >= results[-1]["broadcast_arrived"]
    assert "broadcast_left" not in run_ranks(collectives.barrier_timeline, 2, (0.0,))[0]
    # The picture draws both: the barrier, then the broadcast, each rank from its arrival to its leaving.
    import matplotlib.pyplot as plt

    from ddp_lib.plots.collectives import plot_barrier

    fig = plot_barrier(results)
    assert [ax.get_title().split("(")[0] for ax in fig.axes] == ["dist.barrier", "dist.broadcast"]
    start = min(r["broadcast_arrived"] for r in results)
    segments = [line.get_xdata() for line in fig.axes[1].lines if len(line.get_xdata()) == 2]
    assert [list(x) for x in segments] == [[r["broadcast_arrived"] - start, r["broadcast_left"] - start]
                                           for r in results]
    assert len(plot_barrier([{k: r[k] for k in ("rank", "arrived", "left")} for r in results]).axes) == 1
    plt.close("all")


def test_subgroups_reduce_only_within_their_group():
    results = run_ranks(collectives.subgroups, 4)
    assert [r["group"] for r in results] == ["evens", "odds", "evens", "odds"]
    assert [r["members"] for r in results] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [r["group_rank"] for r in results] == [0, 0, 1, 1]
    assert [r["sum"] for r in results] == [2.0, 4.0, 2.0, 4.0]
    # group rank 1 is global rank 2 in the evens, 3 in the odds; it receives from group rank 0
    assert [r["group_rank_1_is"] for r in results] == [2, 3, 2, 3]
    assert [r["received_from"] for r in results] == [0, 1, 0, 1]
    # new_group numbers groups in call order on every rank; the default group is "0"
    assert [r["group_name"] for r in results] == ["1", "2", "1", "2"]


def test_subgroups_with_local_synchronization_are_created_by_their_members_only(monkeypatch):
    import ddp_lib.mp
    from ddp_lib.process_group import free_port

    # As lesson 01 runs it: rank 0 serves the store, which the odd ranks still need after rank 0's group is made.
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    results = ddp_lib.mp.labelled_spawn(collectives.subgroups, args=(4, True), nprocs=4)
    assert [r["members"] for r in results] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [r["sum"] for r in results] == [2.0, 4.0, 2.0, 4.0]
    names = [r["group_name"] for r in results]
    # named by its ranks, not by a counter: the members agree, the two groups differ
    assert names[0] == names[2] != names[1] == names[3]
    assert not set(names) & {"1", "2"}


def test_send_recv_moves_rank0s_tensor_to_rank1_only():
    results = run_ranks(point_to_point.send_recv, 3)
    assert [r["after"] for r in results] == [start(0, 3), start(0, 3), start(2, 3)]


def test_isend_irecv_pass_right():
    results = run_ranks(point_to_point.pass_right, 3)
    assert [r["after"] for r in results] == [start(2, 3), start(0, 3), start(1, 3)]


@pytest.mark.parametrize("numel", [1, 1 << 20])
def test_two_blocking_sends_deadlock_on_gloo_at_any_size(numel):
    # gloo does not buffer: a send completes only once the peer posts the matching recv.
    results = run_ranks(point_to_point.swap, 2, (numel, "both_send_first", 2.0), backend="gloo")
    assert [r["completed"] for r in results] == [False, False]
    errors = {r["error"] for r in results}
    assert "Timed out waiting 2000ms for send operation to complete" in errors
    assert errors <= {"Timed out waiting 2000ms for send operation to complete", "Connection closed by peer"}


@pytest.mark.parametrize("order", ["by_parity", "isend"])
def test_ordered_or_asynchronous_sends_complete(order):
    results = run_ranks(point_to_point.swap, 2, (1 << 20, order, 10.0))
    assert [(r["completed"], r["error"]) for r in results] == [(True, "")] * 2


def test_gloo_message_drops_paths_and_addresses():
    text = ("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:3795. This is typically caused by a remote worker crashing.")
    assert point_to_point.gloo_message(text) == "Connection closed by peer"


def test_plot_collective_draws_every_value():
    import matplotlib.pyplot as plt

    from ddp_lib.plots.collectives import plot_collective

    fig = plot_collective(run_ranks(collectives.run_collective, 2, ("all_gather",)))
    plt.close(fig)
    before, after = fig.axes
    assert [t.get_text() for t in before.texts] == ["1", "2", "11", "12"]
    assert [t.get_text() for t in after.texts] == ["1", "2", "11", "12"] * 2


def test_the_broadcast_tree_reaches_every_rank_once_in_log2_rounds():
    from ddp_lib.plots.collectives import binomial_broadcast_sends

    assert binomial_broadcast_sends(4) == [(1, 0, 1), (2, 0, 2), (2, 1, 3)]
    for world_size in range(2, 10):
        for src in range(world_size):
            sends = binomial_broadcast_sends(world_size, src)
            receivers = [receiver for _, _, receiver in sends]
            assert sorted(receivers) == sorted(set(range(world_size)) - {src})
            assert max(rnd for rnd, _, _ in sends) == (world_size - 1).bit_length()
            has_data = {src}
            for rnd in sorted({rnd for rnd, _, _ in sends}):  # a rank sends only data it already holds
                this_round = [(s, r) for n, s, r in sends if n == rnd]
                assert all(s in has_data for s, _ in this_round)
                has_data |= {r for _, r in this_round}


def test_the_schematic_pictures_draw():
    import matplotlib.pyplot as plt

    from ddp_lib.plots.collective_sketches import plot_async_timeline, plot_subgroups, plot_when_ranks_disagree
    from ddp_lib.plots.collectives import plot_barrier_plan, plot_broadcast_tree, plot_send_deadlock
    from ddp_lib.plots.spawning import plot_fork_with_lock
    from ddp_lib.plots.store import plot_store_exchange, plot_store_port

    for fig in (plot_broadcast_tree(4, 0, late=3), plot_broadcast_tree(3, 1), plot_send_deadlock(),
                plot_barrier_plan(4, 0.1), plot_store_exchange(3), plot_store_port(12355), plot_fork_with_lock(),
                plot_async_timeline(), plot_subgroups(4), plot_when_ranks_disagree()):
        assert fig.axes[0].texts
        plt.close(fig)


def test_call_source_shows_the_lines_that_run_each_collective():
    for name in collectives.COLLECTIVES:
        lines = collectives.call_source(name).splitlines()
        assert any(line.startswith(f"dist.{name}(") for line in lines), name
        assert all(not line.startswith((" ", "elif", "if name")) for line in lines), name
    assert "gather_list=pieces" in collectives.call_source("gather")
    with pytest.raises(ValueError, match="unknown collective"):
        collectives.call_source("all_reduce_coalesced")
