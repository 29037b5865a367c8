"""Lesson 05's checks, on real ranks: per-rank batch norm statistics and the wrapper's re-sync, whose data
they describe with and without the forward buffer sync, a metric counted two ways, rank 0's
evaluation with the buffer sync off, the bucket rebuild's broadcasts in the first forward with gradients
on, your own all-reduce inside Join, a save that fails half-way, and the crash and resume of the
lesson's runner."""

import os
import re
import time
from pathlib import Path

import pytest
import torch

from ddp_lib.demos import training_checks
from ddp_lib.demos.diff_loop import diff_loop
from ddp_lib.demos.training_runs import train_with_switches
from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks
from ddp_lib.workers import template
from ddp_lib.workers.train_pitfalls import rank0_evaluation


def test_batchnorm_statistics_differ_until_an_evaluation_through_the_wrapper():
    r0, r1 = run_ranks(training_checks.batchnorm_statistics, 2, show_output=False)
    assert r0["after_training"] != r1["after_training"]
    assert r0["after_wrapper_eval"] == r1["after_wrapper_eval"] == r0["after_training"]
    assert r0["averaged"] == r1["averaged"]
    pairs = zip(r0["averaged"], r0["after_training"], r1["after_training"])
    assert all(abs(m - (a + b) / 2) < 2e-4 for m, a, b in pairs)



def test_batchnorm_statistics_are_rank_0s_unless_the_forward_sync_is_off():
    synced = run_ranks(training_checks.batchnorm_data_sources, 2, show_output=False)
    assert abs(synced[0]["own"]) < 1 and abs(synced[0]["averaged"]) < 1  # rank 0's data, near 0
    assert synced[0]["global"] > 4  # the global batches' means, near 5
    assert abs(synced[1]["own"] - synced[0]["own"]) < 1.5  # one update of rank 1's away
    apart = run_ranks(training_checks.batchnorm_data_sources, 2, kwargs=dict(forward_sync_buffers=False),
                      show_output=False)
    assert abs(apart[0]["averaged"] - apart[0]["global"]) < 0.02
    # averaging fixes the mean only: the averaged variance leaves out the spread between the ranks' means
    assert apart[0]["var_averaged"] < 2 and apart[0]["var_global"] > 20


def test_batchnorm_data_sources_both_in_one_job_equal_two_jobs():
    # lesson 05 runs both settings in one job; each must give what its own job gives
    both = run_ranks(training_checks.batchnorm_data_sources_both, 2, show_output=False)
    for sync in (True, False):
        alone = run_ranks(training_checks.batchnorm_data_sources, 2, kwargs=dict(forward_sync_buffers=sync),
                          show_output=False)
        assert [r[sync] for r in both] == alone
    assert both[0][True]["averaged"] != both[0][False]["averaged"]


def test_strided_split_counts_each_sample_once_and_the_sampler_pads():
    counted = run_ranks(training_checks.accuracy_two_ways, 4, show_output=False)[0]
    assert counted == {"strided": (6, 10), "DistributedSampler": (7, 12), "true": (6, 10)}

def test_rank0_evaluates_through_the_wrapper_without_the_buffer_sync():
    results = run_ranks(training_checks.rank0_eval_without_buffer_sync, 2, show_output=False)
    assert results[0]["accuracy"] is not None and results[1]["accuracy"] is None


def test_rank0_through_the_wrapper_fails_in_the_buffer_sync():
    with pytest.raises(WorkerError) as caught:
        run_ranks(rank0_evaluation, 2, kwargs=dict(through="wrapper", timeout_s=2.0), show_output=False)
    assert training_checks.failed_in_buffer_sync(caught.value)


def test_the_first_forward_with_gradients_on_after_a_step_broadcasts_the_rebuilt_buckets_once():
    for world_size in (1, 2):
        for counts in run_ranks(training_checks.forward_collectives, world_size, show_output=False):
            assert counts == {"training step 1": {"allreduce_": 1}, "forward 1, under torch.no_grad()": {},
                              "forward 2, with gradients on": {"broadcast_": 2},
                              "forward 3, with gradients on": {},
                              "after a Join block, under torch.no_grad()": {"allreduce_": 2}}
    # with no no_grad forward in between, the very next forward rebuilds
    counts = run_ranks(training_checks.forward_collectives, 1, kwargs=dict(grad_on=(True,), after_join=False),
                      show_output=False)[0]
    assert counts == {"training step 1": {"allreduce_": 1}, "forward 1, with gradients on": {"broadcast_": 2}}


def test_own_allreduce_inside_join_times_out_and_throw_stops_every_rank():
    hung = run_ranks(training_checks.own_allreduce_in_join, 2, show_output=False)
    assert [r["timed_out"] for r in hung] == [True, True], hung
    assert all(re.search(r"Timed out|timeout|Connection closed by peer", r["error"]) for r in hung), hung
    assert not any(re.search(r"\[[0-9.]+\]:\d+|\.cc:\d+", r["error"]) for r in hung), hung  # no address, no path
    thrown = run_ranks(training_checks.own_allreduce_in_join, 2, kwargs=dict(throw_on_early_termination=True),
                       show_output=False)
    assert thrown[0]["error"] == "Rank 0 exhausted all inputs."
    assert thrown[1]["error"].startswith("Detected at least one rank that exhausted inputs")
    assert [r["steps"] for r in thrown] == [2, 2]


def test_an_interrupted_atomic_save_leaves_the_old_checkpoint(tmp_path):
    assert training_checks.interrupted_save(template.save_checkpoint, str(tmp_path)) == {
        "atomic save": "epoch 1", "plain torch.save": "RuntimeError"}


def test_weights_only_refuses_a_file_that_names_code(tmp_path):
    assert training_checks.weights_only_refusal(str(tmp_path)) == {
        "weights_only=True": "refused: UnpicklingError",
        "weights_only=False": "loaded; ['a function the file named ran']"}


def test_rank0_through_the_module_with_one_group_passes_the_barrier():
    results = run_ranks(training_checks.rank0_eval_one_group, 2, kwargs=dict(through="module", timeout_s=2.0),
                        show_output=False)
    assert results[0]["accuracy"] is not None and results[1]["accuracy"] is None


def test_rank0_through_the_wrapper_with_one_group_fails_on_every_rank_without_naming_the_cause():
    with pytest.raises(WorkerError) as caught:
        run_ranks(training_checks.rank0_eval_one_group, 2, kwargs=dict(timeout_s=2.0), show_output=False)
    assert sorted(caught.value.failures) == [0, 1]
    assert training_checks.one_group_failure(caught.value) == {"rank 0 in the buffer sync": True,
                                                               "a message names the cause": False}


def test_the_lessons_crash_at_epoch_3_then_resume_gives_diff_loops_losses_and_parameters(tmp_path):
    # "A crash, then a resume": the runner's fail_at_epoch, then resume=True, as the lesson's cells run them.
    settings = dict(epochs=4, batch_size=16, lr=0.1, checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(WorkerError, match="injected failure at epoch 3 on rank 1"):
        run_ranks(train_with_switches, 2, kwargs=dict(fail_at_epoch=3, **settings), show_output=False)
    assert sorted(os.listdir(settings["checkpoint_dir"])) == ["epoch_001.pt", "epoch_002.pt"]
    resumed = run_ranks(train_with_switches, 2, kwargs=dict(resume=True, **settings), show_output=False)[0]
    assert resumed["start_epoch"] == 2
    plain_path = str(tmp_path / "plain.pt")
    plain = run_ranks(diff_loop, 2, kwargs=dict(epochs=4, checkpoint=plain_path), show_output=False)[0]
    assert all(abs(a - b) < 1e-5 for a, b in zip(resumed["losses"], plain, strict=True))
    state = torch.load(os.path.join(settings["checkpoint_dir"], "epoch_004.pt"), map_location="cpu", weights_only=True)
    # diff_loop saves the model, the optimizer and the epoch
    saved = torch.load(plain_path, map_location="cpu", weights_only=True)["model"]
    assert max((state["model"][k] - saved[k]).abs().max().item() for k in saved) < 1e-6


def test_error_lines_keep_each_ranks_first_line_without_gloos_address_and_advice():
    error = WorkerError(1, "RuntimeError", "x", failures={
        1: "RuntimeError: Connection closed by peer [127.0.0.1]:1203. This is typically caused by a remote worker "
           "crashing. Check the logs of the remote worker before reporting an error.\nsecond line",
        0: "RuntimeError: Timed out waiting 2000ms for send operation to complete"})
    assert training_checks.error_lines(error) == {
        0: "RuntimeError: Timed out waiting 2000ms for send operation to complete",
        1: "RuntimeError: Connection closed by peer"}


def test_template_core_view_marks_the_ddp_lines_and_keeps_the_make_calls():
    view = training_checks.template_core_view().splitlines()
    assert view[0].startswith(">> ") and "setup_job" in view[0]
    marked = {line.strip() for line in view if line.startswith(">> ")}
    assert any("totals = torch.zeros" in line and "device=device" in line for line in marked)
    assert any("ddp_model = DDP(" in line for line in marked)
    for call in ("make_datasets()", "make_model()", "make_optimizer(", "make_loss()"):
        assert any(call in line for line in view), call
    for kept in training_checks._TEMPLATE_KEEP:  # a line renamed in the template drops out of the view
        assert any(kept in line for line in view), kept
    rewritten = [line.strip() for line in view if line.endswith("  # simplified")]
    assert rewritten == ["for x, y in loader:  # simplified", "loss.backward()  # simplified"]  # not the file's text
    assert not any("  # " in line for line in view  # the other end-of-line comments dropped
                   if not line.strip().startswith("#") and not line.endswith("  # simplified"))
    seeded = next(i for i, line in enumerate(view) if "torch.manual_seed(seed + rank)" in line)
    assert view[seeded - 1].strip().startswith("#")  # a comment kept: why each rank seeds differently
    same = view.index("           torch.manual_seed(seed)")
    assert "same initial weights" in view[same - 1]  # and why every rank first seeds the same
    assert view.index(next(line for line in view if "make_model()" in line)) > same
    assert sum(line.strip().startswith("#") for line in view) == 3
    # at --accumulate 1: no accumulation lines, and the step's lines one level out, as in a plain loop
    assert not any(word in line for line in view for word in ("no_sync", "batches", "step_now", "first ="))
    step = [line.split("  # ")[0].strip() for line in view
            if line.split("  # ")[0].strip() in ("for x, y in loader:", "loss.backward()", "optimizer.step()")]
    assert step == ["for x, y in loader:", "loss.backward()", "optimizer.step()"]
    backward = next(line for line in view if line.strip() == "loss.backward()  # simplified")
    forward = next(line for line in view if "loss = loss_fn(ddp_model(x), y)" in line)
    assert backward[3:].index("loss") == forward[3:].index("loss")  # after the 3-wide ">> " or "   " mark


def test_run_rank0_eval_passes_through_the_module_and_fails_in_the_buffer_broadcast_through_the_wrapper():
    module = training_checks.run_rank0_eval("module", timeout_s=2.0)
    assert module["finished"] and module["accuracy"] is not None and module["errors"] == {}
    wrapper = training_checks.run_rank0_eval("wrapper", timeout_s=2.0)
    assert not wrapper["finished"] and wrapper["accuracy"] is None
    assert sorted(wrapper["errors"]) == [0, 1]
    assert wrapper["in_buffer_broadcast"] and not wrapper["names_the_cause"]


def test_run_uneven_without_join_reports_the_rank_that_lost_its_peer():
    outcome = training_checks.run_uneven_without_join()
    assert outcome["failed_rank"] == 1  # rank 0 ran out of batches and left
    assert outcome["lost"] and outcome["error"].startswith("RuntimeError")


def test_template_with_crash_saves_the_epochs_before_it_and_the_resume_matches_an_uninterrupted_run(tmp_path):
    # Lesson 05's crash and resume: the template's train_job, rank 1 raising at epoch 2's first step.
    crashed = str(tmp_path / "crashed")
    with pytest.raises(WorkerError) as failure:
        run_ranks(training_checks.template_with_crash, 2,
                  kwargs=dict(crash_epoch=2, epochs=2, checkpoint_dir=crashed), show_output=False)
    assert "injected failure at epoch 2 on rank 1" in str(failure.value.failures[1])
    assert os.listdir(crashed) == ["last.pt"]
    assert torch.load(os.path.join(crashed, "last.pt"), weights_only=True)["epoch"] == 1
    resumed = run_ranks(template.train_job, 2, kwargs=dict(epochs=2, checkpoint_dir=crashed), show_output=False)[0]
    straight = run_ranks(template.train_job, 2, kwargs=dict(epochs=2, checkpoint_dir=str(tmp_path / "straight")),
                         show_output=False)[0]
    assert resumed["start_epoch"] == 1 and straight["start_epoch"] == 0
    assert [h["loss"] for h in resumed["history"]] == pytest.approx([h["loss"] for h in straight["history"]], abs=1e-5)
    a, b = (torch.load(os.path.join(d, "last.pt"), weights_only=True)["model"]
            for d in (crashed, tmp_path / "straight"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def test_run_commands_at_once_gives_a_python_command_a_free_port_and_no_thread_count(tmp_path, monkeypatch, capsys):
    # Lesson 05 prints the command as typed: the template itself shares the cores under mp.spawn.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    probe = ("python -c \"import os; "
             "print(os.environ.get('OMP_NUM_THREADS', 'unset'), os.environ['MASTER_PORT'].isdigit())\"")
    assert training_checks.run_commands_at_once([str(tmp_path)], [probe]) == ["unset True"]


def test_run_commands_at_once_drops_only_torchruns_log_lines_and_adds_a_failed_exit_code(tmp_path, capsys):
    commands = ["python -c \"print('W1206 10:23:26.1 42 run.py:874] a log line'); print('kept')\"",
                "python -c \"print('I1206 10:23:26.1 42 api.py:9] Setting OMP_NUM_THREADS environment variable "
                "for each process to be 1'); raise SystemExit(3)\""]
    shown = training_checks.run_commands_at_once([str(tmp_path)] * 2, commands)
    assert shown[0] == "kept"  # the log line is left out, the rest kept
    assert shown[1] == ("torchrun's warning: Setting OMP_NUM_THREADS environment variable for each process to be 1"
                        "\n(exit code 3)")


def test_run_commands_at_once_stops_a_job_past_its_deadline_with_what_it_started(tmp_path, capsys):
    # The job starts a child of its own and hangs; both must be gone when the error is raised.
    pid_file = tmp_path / "child.pid"
    hang = ("python -c \"import subprocess, sys, time; "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            f"open(r'{pid_file}', 'w').write(str(child.pid)); time.sleep(600)\"")
    with pytest.raises(TimeoutError, match="still running after 3 s"):
        training_checks.run_commands_at_once([str(tmp_path)] * 2, ["python -c \"print('quick')\"", hang],
                                             timeout_s=3)
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
    for _ in range(50):  # killed: gone, or a zombie until whoever adopted it reaps it
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the hung job's child is still running")


def test_run_commands_at_once_wants_one_folder_per_command_before_starting_any(tmp_path, capsys):
    with pytest.raises(ValueError, match="1 folders for 2 commands"):
        training_checks.run_commands_at_once([str(tmp_path)], ["python -c pass", "python -c pass"])
    assert capsys.readouterr().out == ""  # nothing said, nothing started


def test_run_commands_at_once_runs_python_and_torchrun_side_by_side_to_the_same_losses(tmp_path, capsys):
    import shutil

    folders = [tmp_path / "spawn", tmp_path / "torchrun"]
    for folder in folders:
        folder.mkdir()
        shutil.copy(template.__file__, folder)
    commands = ["python template.py --epochs 2", "torchrun --standalone --nproc-per-node 2 template.py --epochs 2"]
    shown = training_checks.run_commands_at_once([str(f) for f in folders], commands)
    printed = capsys.readouterr().out
    assert printed.startswith("2 jobs starting at once")  # said before the wait, not after
    assert printed.index(f"$ cd spawn && {commands[0]}\n") < printed.index(f"$ cd torchrun && {commands[1]}\n")
    losses = [re.findall(r"loss (\d\.\d+)", out) for out in shown]
    assert len(losses[0]) == 2 and losses[0] == losses[1]  # the same job under both launchers
    assert not any("(exit code" in out for out in shown)
    assert not any(training_checks._TORCHRUN_LOG.match(line) for out in shown for line in out.splitlines())
    for folder in folders:
        assert torch.load(folder / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)["epoch"] == 2
