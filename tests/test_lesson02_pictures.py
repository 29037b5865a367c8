"""Lesson 02's schematics of who serves the store and how errors and results come back: what each
one says, and that torch's launcher does what the picture of it shows."""

import importlib
import inspect

import matplotlib

matplotlib.use("Agg")

from ddp_lib.plots.spawning import plot_error_and_return_paths, plot_who_serves_the_store  # noqa: E402

# The module, not the function of the same name that torch.multiprocessing exports.
torch_spawn = importlib.import_module("torch.multiprocessing.spawn")


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_the_store_picture_has_rank_0_serve_under_mp_spawn_and_the_agent_under_torchrun():
    shown = texts(plot_who_serves_the_store(nprocs=2))
    assert "store on MASTER_PORT\n(served by rank 0's\ninit_process_group)" in shown
    assert "store on MASTER_PORT\n(served by the agent)" in shown
    assert "agent (torchrun's process)\npicks a free port (recent torch)" in shown  # no term the lesson has not defined
    assert sum(text.startswith("rank ") for text in shown) == 4  # two ranks in each of the two panels


def test_the_error_picture_matches_torchs_launcher():
    shown = texts(plot_error_and_return_paths())
    assert "a temporary\nerror file" in shown and "dropped" in shown
    wrap = inspect.getsource(torch_spawn._wrap)
    assert "fn(i, *args)" in wrap  # the return value is not kept
    assert "pickle.dump(traceback.format_exc(), fh)" in wrap  # the traceback goes to the error file as text
    assert "raise ProcessRaisedException(msg, error_index, failed_process.pid)" in inspect.getsource(
        torch_spawn.ProcessContext.join)


def test_the_pickled_worker_picture_marks_the_lookup_that_fails():
    from ddp_lib.plots.spawning import plot_pickled_worker

    assert not any("fails" in text for text in texts(plot_pickled_worker("ddp_lib.workers.spawning", "record_args")))
    shown = texts(plot_pickled_worker("__main__", "hello", nprocs=2, fails=True))
    failing = [text for text in shown if "fails" in text]
    assert len(failing) == 2 and all("fn = __main__.hello   <- fails" in text for text in failing)


def test_the_finally_timeline_has_each_rank_wait_in_a_different_collective():
    from ddp_lib.plots.finally_timeline import plot_collective_in_finally

    shown = texts(plot_collective_in_finally())
    assert "backward: all-reduce, waits for rank 1's gradients" in shown
    assert "finally: barrier, waits for rank 0" in shown


def test_the_shared_model_picture_has_every_rank_step_the_one_weight():
    from ddp_lib.plots.spawning import plot_shared_model

    fig = plot_shared_model(nprocs=2, lr=0.1, gradient=4)
    shown = texts(fig)
    assert "rank 0\nSGD step -0.4" in shown and "rank 1\nSGD step -0.4" in shown
    assert "the kernel's weight, in shared memory\n0 -> -0.8 after 2 steps" in shown  # what lesson 02's cell prints
    assert shown.count("no own copy") == 2  # one label per rank, legible: no cross drawn over it
    assert not any(line.get_color() == "tab:red" for ax in fig.axes for line in ax.lines)


def test_start_time_labels_sit_right_of_every_dot():
    """Each median label of the start-time plot is placed right of that method's slowest run, not on a dot."""
    from ddp_lib.plots.spawning import plot_start_times

    times = {"spawn": [0.2, 0.35, 0.18], "forkserver": [0.07, 0.09, 0.06]}
    fig = plot_start_times(times)
    ax = fig.axes[0]
    labels = {a.get_text(): a.xy[0] for a in ax.texts}
    assert labels == {"0.20 s": 0.35, "0.07 s": 0.09}
    assert ax.get_xlim()[1] >= 4 * 0.35
    matplotlib.pyplot.close(fig)
