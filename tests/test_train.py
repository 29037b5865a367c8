"""Lesson 05: the training worker on real processes (gloo), its checkpoints, and the checker.

``copied_train`` is ``ddp_lib/workers/train.py``'s, the job a learner copies; ``train`` is the lesson's
(``ddp_lib/demos/training_runs.py``, which ``python -m ddp_lib run train`` starts): the same parts
with the lesson's switches and the guards of a shared checkpoint directory."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from conftest import screen
from ddp_lib.demos.training_checks import warmup_rates
from ddp_lib.demos.training_runs import (
    load_latest_checkpoint,
    read_checkpoint,
    save_epoch_checkpoint,
)
from ddp_lib.demos.training_runs import train_with_switches as train
from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.launch import launch, run_ranks
from ddp_lib.workers.train import latest_checkpoint, list_checkpoints, save_epoch_file, warmup_factor
from ddp_lib.workers.train import train as copied_train  # the file a learner copies; train: the lesson's, around it
from ddp_lib.workers.train_pitfalls import state_dict_keys, train_runs, uneven_batches

# Float tolerance for "the same parameters": N ranks sum their gradients in a different order
# than one process does; measured differences are below 1e-6 after 4 epochs.
ATOL = 1e-5


def _max_diff(a: dict, b: dict) -> float:
    return (torch.tensor(a["params"]) - torch.tensor(b["params"])).abs().max().item()


def test_n_ranks_at_batch_b_equal_one_rank_at_batch_n_times_b():
    # epochs, batch_size, lr, seed
    one = run_ranks(copied_train, 1, args=(3, 32, 0.1, 0), show_output=False)[0]
    two = run_ranks(copied_train, 2, args=(3, 16, 0.1, 0), show_output=False)
    assert two[0]["params"] == two[1]["params"]  # replicas agree exactly
    assert _max_diff(one, two[0]) < ATOL
    assert one["losses"] == pytest.approx(two[0]["losses"], abs=1e-5)
    assert two[0]["losses"] == two[1]["losses"]  # the averaged loss is the same on every rank
    # and it is a real change: a different global batch gives different parameters
    other = run_ranks(copied_train, 1, args=(3, 16, 0.1, 0), show_output=False)[0]
    assert _max_diff(one, other) > 1e-2


def test_forgetting_set_epoch_repeats_the_order_and_rank_0_prints_progress():
    without = run_ranks(train, 2, args=(3, 16, 0.1, 0, "", 0, 0), show_output=False)
    assert without[0]["order"][0] == without[0]["order"][1] == without[0]["order"][2]
    res = launch(train, 2, args=(3, 16, 0.1, 0), show_output=False)
    orders = res.results[0]["order"]
    assert orders[0] != orders[1] != orders[2]
    assert not set(res.results[0]["order"][0]) & set(res.results[1]["order"][0])
    assert res.stdout[0].splitlines()[-1].startswith("epoch  3/3 [####################] loss ")
    assert res.stdout[1] == ""


def test_crash_then_resume_continues_where_it_stopped(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(WorkerError) as info:
        run_ranks(train, 2, args=(4, 16, 0.1, 0, ckpt, 1, 1, "none", 3), show_output=False)
    assert info.value.rank == 1 and info.value.message == "injected failure at epoch 3 on rank 1"
    assert list_checkpoints(ckpt) == ["epoch_001.pt", "epoch_002.pt"]
    # The copied job resumes from the lesson's checkpoints: the same files, the same state.
    resumed = run_ranks(copied_train, 2, args=(4, 16, 0.1, 0, ckpt, 1), show_output=False)
    straight = run_ranks(copied_train, 2, args=(4, 16, 0.1, 0), show_output=False)
    assert [r["start_epoch"] for r in resumed] == [2, 2]
    assert resumed[0]["losses"] == straight[0]["losses"]  # epochs 1-2 from the checkpoint, 3-4 trained
    assert _max_diff(resumed[0], straight[0]) < 1e-6
    state = read_checkpoint(latest_checkpoint(ckpt))
    assert state["epoch"] == 4
    assert list(state["model"]) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]  # no "module."
    assert "momentum_buffer" in state["optimizer"]["state"][0]


def test_a_crash_while_saving_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    save_epoch_checkpoint(str(tmp_path), 1, {"epoch": 1, "w": torch.ones(3)})

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # as if the job were killed mid-write

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_epoch_checkpoint(str(tmp_path), 2, {"epoch": 2, "w": torch.zeros(3)})
    assert sorted(os.listdir(tmp_path)) == ["epoch_001.pt"]  # no partial file, no stray temp file
    assert read_checkpoint(latest_checkpoint(str(tmp_path)))["epoch"] == 1


def test_the_copied_save_leaves_the_previous_checkpoint_whole_when_it_crashes(tmp_path, monkeypatch):
    first, second = (os.path.join(str(tmp_path), f"epoch_00{e}.pt") for e in (1, 2))
    save_epoch_file(first, {"epoch": 1, "w": torch.ones(3)})

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_epoch_file(second, {"epoch": 2, "w": torch.zeros(3)})
    assert not os.path.exists(second)
    assert list_checkpoints(str(tmp_path)) == ["epoch_001.pt"]  # its .tmp file is no checkpoint
    assert latest_checkpoint(str(tmp_path)) == first and read_checkpoint(first)["epoch"] == 1


def test_checkpoints_are_ordered_by_epoch_number_past_999(tmp_path):
    for epoch in (998, 1000, 999, 1001):
        if epoch == 999:  # saved after 1000: the directory is said to hold a later epoch
            with pytest.warns(UserWarning, match="also holds epoch_1000.pt, later than epoch 999"):
                save_epoch_checkpoint(str(tmp_path), epoch, {"epoch": epoch})
        else:
            save_epoch_checkpoint(str(tmp_path), epoch, {"epoch": epoch})
    assert list_checkpoints(str(tmp_path)) == ["epoch_998.pt", "epoch_999.pt", "epoch_1000.pt", "epoch_1001.pt"]
    assert read_checkpoint(latest_checkpoint(str(tmp_path)))["epoch"] == 1001


def test_resume_after_epoch_1000_continues_from_1000(tmp_path):
    ckpt = str(tmp_path)
    run_ranks(copied_train, 2, kwargs=dict(epochs=2, checkpoint_dir=ckpt), show_output=False)
    state = read_checkpoint(latest_checkpoint(ckpt))
    for epoch in (999, 1000):  # as if the job had run that long
        save_epoch_file(os.path.join(ckpt, f"epoch_{epoch:03d}.pt"), {**state, "epoch": epoch, "losses": [0.5] * epoch})
    resumed = run_ranks(copied_train, 2, kwargs=dict(epochs=1001, checkpoint_dir=ckpt, resume=True), show_output=False)
    assert [r["start_epoch"] for r in resumed] == [1000, 1000]
    assert len(resumed[0]["losses"]) == 1001
    assert read_checkpoint(os.path.join(ckpt, "epoch_1000.pt"))["losses"] == [0.5] * 1000  # not overwritten


def test_an_unreadable_checkpoint_is_named(tmp_path):
    path = save_epoch_checkpoint(str(tmp_path), 1, {"epoch": 1, "w": torch.ones(100)})
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(RuntimeError, match=re.escape(f"checkpoint {path} is truncated or unreadable")):
        read_checkpoint(path)
    with pytest.raises(RuntimeError, match=re.escape(f"no checkpoint in {tmp_path} loads; unreadable: {path}")):
        with pytest.warns(UserWarning, match=re.escape(f"skipped checkpoint {path}")):
            load_latest_checkpoint(str(tmp_path))


def test_resume_skips_a_truncated_latest_checkpoint_with_a_warning(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    straight = run_ranks(train, 2, kwargs=dict(epochs=4, checkpoint_dir=str(tmp_path / "all"), keep_last=2),
                         show_output=False)
    assert list_checkpoints(str(tmp_path / "all")) == ["epoch_003.pt", "epoch_004.pt"]  # keep_last=2
    run_ranks(train, 2, kwargs=dict(epochs=3, checkpoint_dir=ckpt), show_output=False)
    latest = latest_checkpoint(ckpt)
    with open(latest, "r+b") as f:  # a crash of the disk, not of the write: the rename happened
        f.truncate(100)
    res = launch(train, 2, kwargs=dict(epochs=4, checkpoint_dir=ckpt, resume=True), show_output=False)
    assert [r["start_epoch"] for r in res.results] == [2, 2]
    assert f"skipped checkpoint {latest} is truncated or unreadable" in res.stderr[0]
    assert res.results[0]["losses"] == straight[0]["losses"]
    assert _max_diff(res.results[0], straight[0]) < 1e-6


def test_a_stray_temporary_file_is_removed_by_the_next_save(tmp_path):
    stray = tmp_path / ".epoch_crashed.tmp"
    stray.write_bytes(b"half a checkpoint")
    (tmp_path / "notes.tmp").write_text("not ours")
    save_epoch_checkpoint(str(tmp_path), 1, {"epoch": 1})
    assert sorted(os.listdir(tmp_path)) == ["epoch_001.pt", "notes.tmp"]


def test_keep_last_keeps_the_newest_and_rejects_nonsense(tmp_path):
    for epoch in range(1, 6):
        save_epoch_checkpoint(str(tmp_path), epoch, {"epoch": epoch}, keep_last=2)
    assert list_checkpoints(str(tmp_path)) == ["epoch_004.pt", "epoch_005.pt"]
    with pytest.raises(ValueError, match="keep_last must be a positive number of checkpoints or None .*got 0"):
        save_epoch_checkpoint(str(tmp_path), 6, {"epoch": 6}, keep_last=0)


def test_resume_with_no_checkpoint_says_so_in_one_line(tmp_path):
    for job in (copied_train, train):
        res = launch(job, 2, kwargs=dict(epochs=1, checkpoint_dir=str(tmp_path / job.__module__), resume=True),
                     show_output=False)
        assert res.stdout[0].splitlines()[0] == "no checkpoint to resume from yet: starting at epoch 1"
        assert [r["start_epoch"] for r in res.results] == [0, 0]
        with pytest.raises(LaunchInputError, match=r"^resume=True needs checkpoint_dir, got None$"):  # before starting
            run_ranks(job, 1, kwargs=dict(epochs=1, resume=True), show_output=False)
        with pytest.raises(ValueError, match="resume=True needs a checkpoint_dir"):  # the worker's own check
            job(0, 1, epochs=1, resume=True)


def test_sync_batch_norm_restores_the_equivalence_that_batch_norm_breaks():
    one = run_ranks(copied_train, 1, kwargs=dict(epochs=2, batch_size=32, norm="batch"), show_output=False)[0]
    local = run_ranks(copied_train, 2, kwargs=dict(epochs=2, batch_size=16, norm="batch"), show_output=False)[0]
    synced = run_ranks(copied_train, 2, kwargs=dict(epochs=2, batch_size=16, norm="sync"), show_output=False)[0]
    assert _max_diff(one, local) > 1e-3  # statistics of 16 samples, not of the global 32
    assert _max_diff(one, synced) < ATOL


def test_join_lets_ranks_with_fewer_batches_finish():
    results = run_ranks(uneven_batches, 2, args=(1,), show_output=False)
    assert [r["steps"] for r in results] == [2, 4]
    assert results[0]["checksum"] == results[1]["checksum"]
    with pytest.raises(WorkerError) as info:
        run_ranks(uneven_batches, 2, args=(0,), show_output=False, timeout=60)
    assert info.value.rank == 1  # the rank left waiting for a peer that has finished


def test_ddp_state_dict_keys_carry_the_module_prefix():
    keys = run_ranks(state_dict_keys, 1, show_output=False)[0]
    assert keys["ddp_keys"] == ["module." + k for k in keys["module_keys"]]
    assert keys["load_error"].startswith("Error(s) in loading state_dict for MoonsNet")
    assert keys["after_strip"] == "<All keys matched successfully>"
    state = keys["ddp_state"]  # sent back whole, the version of each module included
    assert list(state) == keys["ddp_keys"] and "module" in state._metadata
    consume_prefix_in_state_dict_if_present(state, "module.")
    assert list(state) == keys["module_keys"] and "" in state._metadata


def test_cli_runs_the_worker_and_prints_json(cli_with_ranks):
    proc = cli_with_ranks("run", "train", "--world-size", "2", "--epochs", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    assert [r["rank"] for r in results] == [0, 1] and len(results[0]["losses"]) == 2
    assert "[rank 0] epoch  2/2 [####################] loss" in proc.stdout


# tqdm's last state of rank 0's bar: 2 epochs of 16 steps (512 samples, 2 ranks x 16 per step).
FINAL_BAR = re.compile(r"train: 100%\|.+\| 32/32 \[.+step/s, epoch 2/2, loss 0\.\d{4}\]")


def test_progress_draws_a_bar_on_rank_0s_stderr_only_and_changes_no_result(capsys):
    # The lesson's train with a bar computes what the copied file computes, to the bit.
    plain = run_ranks(copied_train, 2, kwargs=dict(epochs=2), show_output=False)
    job = launch(train, 2, kwargs=dict(epochs=2, progress=True))
    for with_bar, without in zip(job.results, plain):
        assert (with_bar["losses"], with_bar["checksum"], with_bar["params"]) == (
            without["losses"], without["checksum"], without["params"])
    assert FINAL_BAR.fullmatch(job.stderr[0].rstrip("\n")) and job.stderr[0].count("\n") == 1
    assert job.stderr[1] == "" and job.stdout == ["", ""]  # the bar replaces rank 0's line per epoch
    live = capsys.readouterr().err
    (line,) = screen(live)  # one line on screen, however many times it was redrawn
    assert line.startswith("[rank 0] ") and FINAL_BAR.fullmatch(line.removeprefix("[rank 0] "))


def test_cli_progress_flag_draws_the_bar_and_keeps_the_json(cli_with_ranks):
    plain = run_ranks(train, 2, kwargs=dict(epochs=2), show_output=False)
    proc = cli_with_ranks("run", "train", "--world-size", "2", "--epochs", "2", "--progress", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["losses"] for r in json.loads(proc.stdout.splitlines()[-1])] == [r["losses"] for r in plain]
    (line,) = screen(proc.stderr)  # rank 0's bar alone, as one line; nothing from rank 1
    assert FINAL_BAR.fullmatch(line.removeprefix("[rank 0] "))


def test_resuming_another_models_checkpoint_names_the_file_and_the_mismatched_keys(tmp_path):
    ckpt = str(tmp_path)
    run_ranks(train, 1, kwargs={"epochs": 1, "checkpoint_dir": ckpt}, show_output=False)
    with pytest.raises(WorkerError) as caught:
        run_ranks(train, 1, kwargs={"epochs": 2, "checkpoint_dir": ckpt, "resume": True, "norm": "batch"},
                  show_output=False)
    assert os.path.join(ckpt, "epoch_001.pt") in str(caught.value)
    # The summary is the first line; the worker's whole message (the keys) is in its traceback.
    detail = str(caught.value.__cause__)
    assert "Error(s) in loading state_dict for MoonsNet" in detail and "Missing key(s)" in detail


def test_a_resume_error_names_the_file_loaded_not_the_one_its_epoch_names(tmp_path):
    ckpt = str(tmp_path)
    run_ranks(train, 1, kwargs={"epochs": 1, "checkpoint_dir": ckpt}, show_output=False)
    os.rename(os.path.join(ckpt, "epoch_001.pt"), os.path.join(ckpt, "epoch_050.pt"))  # its "epoch" still says 1
    with pytest.raises(WorkerError) as caught:
        run_ranks(train, 1, kwargs={"epochs": 60, "checkpoint_dir": ckpt, "resume": True, "norm": "batch"},
                  show_output=False)
    assert str(caught.value).startswith(f"rank 0 raised RuntimeError: {os.path.join(ckpt, 'epoch_050.pt')}: "
                                        "Error(s) in loading state_dict for MoonsNet")


def test_a_checkpoint_whose_epoch_is_no_whole_number_is_named(tmp_path):
    path = os.path.join(str(tmp_path), "epoch_002.pt")
    run_ranks(train, 1, kwargs={"epochs": 1, "checkpoint_dir": str(tmp_path)}, show_output=False)
    state = read_checkpoint(os.path.join(str(tmp_path), "epoch_001.pt"))
    torch.save({**state, "epoch": "two"}, path)
    with pytest.raises(WorkerError, match=re.escape(f"checkpoint {path} holds epoch 'two', not a whole number")):
        run_ranks(train, 1, kwargs={"epochs": 3, "checkpoint_dir": str(tmp_path), "resume": True, "norm": "batch"},
                  show_output=False)


def test_warmup_changes_the_first_steps_and_a_resume_continues_its_schedule(tmp_path):
    kwargs = dict(epochs=3, batch_size=16, lr=0.4, warmup_steps=24)  # 16 steps per epoch: into epoch 2
    straight = run_ranks(copied_train, 2, kwargs=kwargs, show_output=False)[0]
    plain = run_ranks(copied_train, 2, kwargs={**kwargs, "warmup_steps": 0}, show_output=False)[0]
    assert abs(straight["losses"][0] - plain["losses"][0]) > 1e-3  # the warm-up did change epoch 1
    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(WorkerError):
        run_ranks(train, 2, kwargs={**kwargs, "checkpoint_dir": ckpt, "fail_at_epoch": 2}, show_output=False)
    resumed = run_ranks(copied_train, 2, kwargs={**kwargs, "checkpoint_dir": ckpt, "resume": True},
                        show_output=False)[0]
    assert resumed["start_epoch"] == 1
    assert resumed["losses"] == pytest.approx(straight["losses"], abs=1e-6)  # epoch 2 still warmed up
    assert _max_diff(resumed, straight) < 1e-6


def test_train_runs_shares_one_group_and_gives_what_separate_jobs_give():
    runs = [dict(epochs=2, lr=0.1, seed=1), dict(epochs=2, lr=0.4, seed=2, warmup_steps=4)]
    together = run_ranks(train_runs, 2, kwargs=dict(runs=runs), show_output=False)[0]
    apart = [run_ranks(copied_train, 2, kwargs=kwargs, show_output=False)[0] for kwargs in runs]
    assert [r["losses"] for r in together] == [r["losses"] for r in apart]
    assert together[0]["losses"] != together[1]["losses"]


def test_the_runners_warmup_gives_the_templates_linearlr_rates():
    lr, warmup_steps = 0.4, 4
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    linear = torch.optim.lr_scheduler.LinearLR(probe, start_factor=1 / warmup_steps, total_iters=warmup_steps)
    rates = []
    for _ in range(warmup_steps + 3):
        rates.append(probe.param_groups[0]["lr"])
        probe.step()
        linear.step()
    assert [lr * warmup_factor(k, warmup_steps) for k in range(warmup_steps + 3)] == pytest.approx(rates, abs=1e-12)
    assert warmup_factor(0, warmup_steps) == 1 / warmup_steps and warmup_factor(warmup_steps, warmup_steps) == 1
    # Lesson 05 reads the template's own warm-up in a one-rank job (its first warmup_steps + 1 rates).
    assert run_ranks(warmup_rates, 1, args=(lr, warmup_steps), show_output=False)[0] == [
        round(r, 4) for r in rates[:warmup_steps + 1]]
