"""ddp_lib.demos.eval_every_n and skipped_backward, as lesson 07 runs them: with real ranks."""

import re

import pytest

from ddp_lib.demos import eval_every_n, failure_reading
from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks


def test_rank_0s_lone_metric_meets_the_gradient_all_reduce_and_aborts_in_gloo():
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_every_n_steps, 2, show_output=False)
    failures = caught.value.failures
    assert "SIGABRT" in failures[0]
    assert re.search(r"Connection (closed|reset) by peer", failures[1])
    assert "Is there a distributed collective mismatch" in caught.value.outputs[0][1]


def test_with_batchnorm_the_metric_meets_ddps_buffer_broadcast_and_both_ranks_time_out():
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_every_n_steps, 2, kwargs=dict(batchnorm=True), show_output=False)
    failures = caught.value.failures
    assert sorted(failures) == [0, 1]
    # whichever rank's 3-s timer runs out first says so; under load the other may see the pair closed first
    assert any("Timed out waiting 3000ms" in message for message in failures.values())
    assert all(re.search("timed out|timeout|closed by peer|reset by peer|broken pipe", message, re.I)
               for message in failures.values())
    assert not any("SIGABRT" in message for message in failures.values())


def test_rank_0_evaluating_through_ddp_waits_in_the_buffer_broadcast_while_the_others_wait_in_the_barrier():
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, 2, show_output=False)
    error = caught.value
    assert sorted(error.failures) == [0, 1]
    assert not any("SIGABRT" in message for message in error.failures.values())
    assert "_sync_buffers" in error.tracebacks[0]  # every rank's traceback, whichever rank the launcher names
    assert failure_reading.innermost_calls(error.tracebacks[1], 1) == ["barrier"]


@pytest.mark.parametrize("world_size", [3, 4])
def test_the_probe_before_evaluate_ddp_names_every_rank_that_skips_the_branch(world_size):
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, world_size, kwargs=dict(probe="branch"),
                  show_output=False)
    missing = ", ".join(str(rank) for rank in range(1, world_size))
    assert f"Ranks {missing} failed to pass monitoredBarrier in 3000 ms" in caught.value.failures[0]


@pytest.mark.parametrize("world_size", [3, 4])
def test_the_probe_at_the_epoch_end_points_the_other_ranks_at_rank_0_which_lists_no_missing_rank(world_size):
    # lesson 07's exercise 1 on 4 ranks: rank 0, held in evaluate(ddp, ...), is the missing one
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, world_size, kwargs=dict(probe="epoch_end"),
                  show_output=False)
    failures = caught.value.failures
    for rank in range(1, world_size):
        assert (f"Rank {rank} successfully reached monitoredBarrier, but received errors while waiting for "
                "send/recv from rank 0") in failures[rank]
    # rank 0, held in evaluate(ddp, ...), never reached the barrier it coordinates: its error lists no rank
    assert "failed to pass monitoredBarrier" not in failures[0]


def test_the_probe_at_the_epoch_end_names_a_rank_that_skips_it_and_the_others_point_at_rank_0():
    # the fixed evaluation, rank 2 skips the epoch's end: rank 0 names it
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, 4,
                  kwargs=dict(probe="epoch_end", through_module=True, skip_probe_rank=2), show_output=False)
    failures = caught.value.failures
    assert "Ranks 2 failed to pass monitoredBarrier in 3000 ms" in failures[0]
    for rank in (1, 3):
        assert (f"Rank {rank} successfully reached monitoredBarrier, but received errors while waiting for "
                "send/recv from rank 0") in failures[rank]


def test_the_lines_of_the_skipping_rank_are_shown_neither_with_the_loop_nor_with_the_probe():
    assert "skip_probe_rank:" not in eval_every_n.source_without_probe().split('"""')[-1]
    assert "skip_probe_rank" not in eval_every_n.probe_lines()


def test_an_unknown_probe_is_refused():
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, 1, kwargs=dict(probe=True), show_output=False)
    assert caught.value.exc_type == "ValueError"


def test_rank_0_evaluating_ddp_module_runs_no_collective_and_every_epoch_ends():
    evaluations = run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, 2, kwargs=dict(through_module=True),
                            show_output=False)
    assert len(evaluations[0]) == 2 and evaluations[1] == []


def test_a_rank_that_skips_backward_finishes_one_all_reduce_early_and_the_other_loses_its_partner():
    from ddp_lib.demos import skipped_backward

    with pytest.raises(WorkerError) as caught:
        run_ranks(skipped_backward.train_skipping_backward, 2, show_output=False)
    error = caught.value
    assert sorted(error.failures) == [0]
    assert re.search(r"Connection (closed|reset) by peer|Broken pipe", error.failures[0])
    assert "rank 1 finished, after 3 backward calls" in error.outputs[1][0]


def test_with_buffers_a_skipped_backward_is_a_hang_until_the_timeout():
    from ddp_lib.demos import skipped_backward

    with pytest.raises(WorkerError) as caught:
        run_ranks(skipped_backward.train_skipping_backward, 2, kwargs=dict(batchnorm=True), show_output=False)
    messages = caught.value.failures.values()
    assert sorted(caught.value.failures) == [0, 1]  # neither rank finishes
    # the rank whose timer runs out first times out; the other times out too, or, when load delayed its
    # timer, sees that rank's side of the pair closed first (gloo words it either way)
    assert any(re.search("timed out|timeout", message, re.I) for message in messages)
    assert all(re.search("timed out|timeout|closed by peer|reset by peer|broken pipe", message, re.I)
               for message in messages)


def test_the_source_without_the_probe_is_the_plain_loop_and_still_parses():
    import ast

    source = eval_every_n.source_without_probe()
    ast.parse(source)  # the lines left are a whole function
    assert "monitored_barrier" not in source and "probe_group" not in source
    assert "if not barrier" not in source and "continue" not in source  # the variant without the barrier
    assert "dist.barrier()" in source and "evaluate(ddp.module if through_module else ddp" in source


@pytest.mark.parametrize("probe", ["branch", "epoch_end"])
def test_on_2_ranks_rank_0s_error_names_rank_1_only_when_rank_0_reaches_the_probe(probe):
    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, 2, kwargs=dict(probe=probe), show_output=False)
    named = "Ranks 1 failed to pass monitoredBarrier" in caught.value.failures[0]
    assert named == (probe == "branch")
    if probe == "epoch_end":
        assert "Rank 1 successfully reached monitoredBarrier" in caught.value.failures[1]


def test_without_the_barrier_rank_0s_first_evaluation_through_ddp_ends_and_only_the_last_one_fails():
    from ddp_lib.demos import failure_reading

    with pytest.raises(WorkerError) as caught:
        run_ranks(eval_every_n.evaluate_through_ddp_on_rank0, 2, kwargs=dict(barrier=False, timeout_s=2.0),
                  show_output=False)
    error = caught.value
    assert sorted(error.failures) == [0]  # rank 1 finished its epochs
    assert error.outputs[0][0].strip() == "rank 0 finished its evaluation of epoch 0"
    assert failure_reading.in_ddp_buffer_sync(error.worker_traceback)


def test_the_probe_lines_are_the_workers_own_and_leave_out_comments_and_the_argument_check():
    lines = eval_every_n.probe_lines()
    assert "#" not in lines and "raise ValueError" not in lines and "print(" not in lines
    assert lines.startswith("probe_group = dist.new_group(backend=\"gloo\", timeout=timeout) if probe else None\n")
    assert lines.count("dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)") == 2
    assert lines.index('if probe == "branch":') < lines.index("evaluations.append(") < lines.index(
        'if probe == "epoch_end":') < lines.rindex("dist.barrier()")
    # every line but the "..." that stand for left-out lines is a line of the worker
    import inspect
    source = inspect.getsource(eval_every_n.evaluate_through_ddp_on_rank0)
    assert all(line.strip() in source for line in lines.splitlines() if line.strip() != "...")


def test_the_epoch_end_probe_lines_leave_out_the_branch_placement():
    lines = eval_every_n.probe_lines(placement="epoch_end")
    assert 'probe == "branch"' not in lines and "#" not in lines
    assert lines.count("dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)") == 1
    assert lines.index("if rank == 0:") < lines.index("evaluations.append(") < lines.index(
        'if probe == "epoch_end":') < lines.rindex("dist.barrier()")
    assert "if rank == 0:\n        evaluations.append(" in lines  # no "..." where the branch's lines were


def test_a_skipped_backward_leaves_the_replicas_equal_and_skipping_on_every_rank_fixes_it():
    from ddp_lib.demos import skipped_backward

    with pytest.raises(WorkerError) as caught:
        run_ranks(skipped_backward.train_skipping_backward, 2, show_output=False)
    updates = [[line.split(": ")[1] for line in caught.value.outputs[rank][0].splitlines() if "after update" in line]
               for rank in (0, 1)]
    assert len(updates[0]) == len(updates[1]) == 3 and updates[0] == updates[1]  # pairs one step apart, same params
    runs = run_ranks(skipped_backward.train_skipping_backward, 3, kwargs=dict(skip_on_every_rank=True),
                     show_output=False)
    assert [run["backwards"] for run in runs] == [3, 3, 3]
    assert runs[0]["updates"] == runs[1]["updates"] == runs[2]["updates"]
