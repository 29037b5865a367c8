"""The schematics lessons 06 and 07 draw before their runs: what each one says is drawn from its arguments."""

import matplotlib

matplotlib.use("Agg")

from ddp_lib.plots.cluster import plot_first_mistakes, plot_two_hosts  # noqa: E402
from ddp_lib.plots.cluster_sketches import (  # noqa: E402
    plot_closed_port,
    plot_name_unknown,
    plot_nnodes_mismatch,
    plot_what_listens_where,
)
from ddp_lib.plots.failure_sketches import (  # noqa: E402
    plot_agent_stops_ranks,
    plot_dead_rank,
    plot_detail_check,
    plot_loop_collision,
    plot_mismatched_shapes,
    plot_skipped_backward,
    plot_unused_parameter,
    two_rank_ring,
)
from ddp_lib.plots.torchrun import plot_log_dir_tree, plot_port_choice, plot_restart_timeline  # noqa: E402


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_the_mismatched_shapes_sketch_shows_rank_1s_wrong_numbers_and_rank_0_waiting():
    shown = texts(plot_mismatched_shapes([1.0, 2.0, 3.0], [10.0, 20.0]))
    assert "rank 1 gets [3, 11], not [11, 22]: wrong, and no error" in shown
    assert any("rank 0 then waits for a segment 2 rank 1 never sends" in text for text in shown)
    assert "rank 0: [1, 2, 3]" in shown and "rank 1: [10, 20]" in shown
    assert shown.count("empty") == 3  # rank 0's segment 3, rank 1's segments 2 and 3


def test_the_two_rank_ring_reads_messages_in_the_order_sent_as_gloo_did_in_runs():
    # what rank 1 finished with on gloo (torch 2.13.0), for these tensors: its first number is rank 0's last
    assert two_rank_ring([1.0, 2.0, 3.0], [10.0, 20.0]) == ([3.0, 11.0], [[3.0], [11.0], [22.0]], [0, 1])
    assert two_rank_ring([1.0, 2.0, 4.0], [16.0, 32.0])[0] == [4.0, 17.0]
    assert two_rank_ring([1.0, 2.0], [10.0, 20.0])[0] == [11.0, 22.0]  # the same shapes: the sums
    assert two_rank_ring([1.0, 2.0, 4.0, 8.0, 64.0], [16.0, 32.0, 128.0])[0] == "aborts"  # "8 vs 4" bytes
    assert two_rank_ring([1.0, 2.0], [3.0])[0] == "waits"  # rank 0 waits for a second number: no sums sent


def test_the_skipped_backward_sketch_pairs_rank_0s_step_k_with_rank_1s_step_k_plus_1():
    fig = plot_skipped_backward(steps=4, skipped=1)
    shown = texts(fig)
    assert shown.count("skipped") == 1 and "no partner:\n\"closed by peer\"" in shown
    colours = [t.arrow_patch.get_edgecolor() for t in fig.axes[0].texts if getattr(t, "arrow_patch", None)]
    assert len(colours) == 3  # rank 0's steps 0, 1 and 2 meet rank 1's steps 0, 2 and 3; step 3 meets none


def test_the_dead_rank_sketch_has_one_lane_per_rank_and_one_killed_rank():
    fig = plot_dead_rank(world_size=4)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 3", "rank 2", "rank 1", "rank 0"]
    assert texts(fig).count("SIGKILL: gone, no exception") == 1
    assert texts(fig).count("raises well before the timeout: connection closed") == 3  # ranks 0, 2 and 3
    assert not any("neighbour" in text for text in texts(fig))  # the sketch claims no order among survivors


def test_the_collision_and_port_sketches_name_what_goes_wrong():
    assert "same number (5th), different kinds: not matched, each waits" in texts(plot_loop_collision())
    assert "address already in use" in texts(plot_port_choice())
    assert "plain\n(no options)" in texts(plot_port_choice())  # the plain job gets a free port too
    assert "taken\n--master-port P" in texts(plot_port_choice())  # named as the lesson's cell names its jobs
    assert "29500" not in texts(plot_port_choice())  # the lesson's cell takes a random port: P


def test_the_log_dir_tree_nests_attempts_in_the_run_folder_and_ranks_in_attempts():
    shown = texts(plot_log_dir_tree())
    names = ("<log-dir>/", "<rdzv-id>_<random>/", "attempt_0/", "0/", "error.json", "attempt_1/")
    order = [shown.index(name) for name in names]
    assert order == sorted(order)
    assert any("tempfile.gettempdir()" in text for text in shown)  # TMPDIR, TEMP, TMP, then /tmp: not TMPDIR alone


def test_the_restart_sketch_numbers_epochs_from_0_as_train_py_prints_them():
    fig = plot_restart_timeline(epochs=5, fail_in_epoch=2)
    shown = texts(fig)
    assert "raises in epoch 2" in shown
    per_rank = [t for t in shown if t.isdigit()]
    assert per_rank == ["0", "1", "2", "3", "4"] * 2  # attempt 0: epochs 0-1; attempt 1: epochs 2-4; two ranks
    assert "attempt 1, from the checkpoint of epoch 1" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_the_lesson_07_and_cluster_sketches_name_what_goes_wrong():
    assert "2. SIGTERM: exit code -15" in texts(plot_agent_stops_ranks())
    assert sum("all_gather" in t for t in texts(plot_detail_check())) == 2
    assert any("never ready" in t for t in texts(plot_unused_parameter()))
    assert any("its own loopback" in t for t in texts(plot_first_mistakes()))
    assert sum("(GLOO_SOCKET_IFNAME=lo)" in t for t in texts(plot_first_mistakes())) == 2  # both ranks set it


def test_the_first_cluster_picture_draws_only_what_the_lesson_has_defined_by_then():
    shown = texts(plot_two_hosts(rdzv_port=29400))
    assert "--rdzv-endpoint=node0:29400" in shown and sum(t.startswith("torchrun") for t in shown) == 2
    assert not any("store" in t or "MASTER_PORT" in t or "agent" in t for t in shown)  # defined later, drawn later


def test_the_agent_sketch_names_the_rank_that_fails():
    assert any("rank 0: raises" in t for t in texts(plot_agent_stops_ranks(failing_rank=0)))
    assert any("rank 1: still working" in t for t in texts(plot_agent_stops_ranks(failing_rank=0)))


def test_the_cluster_sketches_say_what_each_mistake_gives():
    assert any("read_timeout" in t for t in texts(plot_closed_port()))
    mismatch = texts(plot_nnodes_mismatch())
    assert any("the job runs" in t for t in mismatch) and any("node0 times out" in t for t in mismatch)
    assert any("listens on nothing" in t for t in texts(plot_what_listens_where()))


def test_the_name_unknown_sketch_joins_by_address_and_fails_at_the_name():
    shown = texts(plot_name_unknown("10.9.0.1", 29555))
    assert "node1's agent\n--rdzv-endpoint=10.9.0.1:29555" in shown
    assert any("the rendezvous completes" in t for t in shown)
    assert any("look up 'node0'" in t for t in shown) and "rank 1\ndials MASTER_ADDR=node0" in shown
