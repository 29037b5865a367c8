"""The template worker (ddp_lib/workers/template.py), copied alone into an empty directory where
ddp_lib cannot be imported by it, runs as a learner runs it: ``python template.py`` (mp.spawn),
``torchrun template.py``, and ddp_lib's launcher (``python -m ddp_lib run mine:train_job`` runs the
edited copy mine.py, not ddp_lib's template). A job stopped after 1 epoch and resumed under another
launcher ends where an uninterrupted one does; a resume with other settings or nothing left says so."""

from __future__ import annotations

import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest
import template_workers
import torch
from torch.utils.data import DistributedSampler

import ddp_lib
from conftest import run_launcher
from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import free_port
from ddp_lib.workers import template

TEMPLATE = pathlib.Path(ddp_lib.__file__).resolve().parent / "workers" / "template.py"
TORCHRUN = pathlib.Path(sys.executable).with_name("torchrun")
EVAL_SAMPLES = 201  # the template's evaluation set: odd, so 2 ranks cannot split it evenly


def _run(command: list[str], cwd: pathlib.Path, env: dict | None = None, returncode: int = 0) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")}
    proc = run_launcher(command, cwd=cwd, env={**base, "MASTER_PORT": str(free_port()), **(env or {})},
                        timeout=300)
    assert proc.returncode == returncode, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("own_project")
    shutil.copy(TEMPLATE, root / "template.py")
    return root


def _state(path: pathlib.Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_the_template_runs_and_resumes_under_mp_spawn_torchrun_and_ddp_lib(project, monkeypatch, capsys):
    # Three fresh interpreters, one per launcher. Uninterrupted, as `python template.py` starts it:
    # mp.spawn, 2 ranks, 2 epochs.
    straight = _run([sys.executable, "-I", "template.py", "--epochs", "2", "--checkpoint-dir", "straight"], project)
    assert len(re.findall(r"^epoch \d/2:", straight, re.MULTILINE)) == 2, straight

    # Stopped after 1 epoch under ddp_lib's launcher, run as the learner runs an edited, renamed
    # copy (the edit shows the launcher ran the file in this directory), resumed to 2 under torchrun.
    edited = (project / "template.py").read_text().replace('print(f"epoch {', 'print(f"edited copy, epoch {')
    assert "edited copy" in edited
    (project / "mine.py").write_text(edited)
    launched = _run([sys.executable, "-m", "ddp_lib", "run", "mine:train_job", "--world-size", "2", "--epochs", "1",
                     "--checkpoint-dir", "resumed"], project)
    assert "edited copy, epoch 1/1" in launched, launched
    assert _state(project / "resumed" / "last.pt")["epoch"] == 1
    resumed = _run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "template.py", "--epochs", "2",
                    "--checkpoint-dir", "resumed"], project)
    assert "resuming from resumed/last.pt: 1 epochs done" in resumed, resumed
    assert "epoch 1/2" not in resumed and "epoch 2/2" in resumed, resumed
    assert "was written with" not in resumed, resumed

    a, b = _state(project / "straight" / "last.pt"), _state(project / "resumed" / "last.pt")
    assert a["epoch"] == b["epoch"] == 2
    assert [h["evaluated"] for h in a["history"]] == [EVAL_SAMPLES] * 2  # each sample counted once
    assert a["history"][-1]["accuracy"] > 0.9  # it learns
    for x, y in zip(a["history"], b["history"]):
        assert x == pytest.approx(y, abs=1e-6)
    for name, tensor in a["model"].items():
        assert torch.allclose(tensor, b["model"][name], atol=1e-6), name
    assert not list((project / "resumed").glob("*.tmp"))  # the temporary file was renamed into place

    # Run again with another lr and no more epochs: a warning, and no silent "resumed". The same
    # train and load_checkpoint as above, here in this process as a group of one rank.
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with pytest.warns(UserWarning, match="is not used") as warned:
        again = template.train_job(0, 1, epochs=2, lr=0.1, checkpoint_dir=str(project / "resumed"))
    # One short line on the rate, then the other changed setting (1 rank here, 2 when it was written);
    # no other warning raised meanwhile (a ResourceWarning for an unclosed file, say).
    messages = [str(w.message) for w in warned if w.category is UserWarning]
    assert messages[0] == ("--lr 0.1 is not used: the resumed optimizer keeps the saved learning rate 0.05 "
                           "(for a new rate, give another --checkpoint-dir)"), messages
    assert len(messages) == 2 and "was written with" in messages[1], messages
    written, this_run = messages[1].split("this run has")
    assert "'world_size': 2" in written and "'world_size': 1" in this_run, messages
    printed = capsys.readouterr().out
    assert "nothing left to train" in printed and "epoch 2/2" not in printed, printed
    assert again["start_epoch"] == 2 and again["history"] == b["history"]
    assert _state(project / "resumed" / "last.pt")["epoch"] == 2  # untouched


def _final_model(directory: pathlib.Path) -> dict:
    return _state(directory / "last.pt")["model"]


def test_accumulate_all_reduces_once_per_optimizer_step_and_matches_the_larger_batch(tmp_path):
    # 1000 samples: 500 per rank, so 20 batches of 25, 10 optimizer steps of 2 x 25, or 10 of 50.
    epochs = 2
    runs = {name: run_ranks(template_workers.train_counting_allreduces, 2,
                            kwargs=dict(epochs=epochs, checkpoint_dir=str(tmp_path / name), **settings))[0]
            for name, settings in {"25": dict(batch_size=25), "25 x 2": dict(batch_size=25, accumulate=2),
                                   "50": dict(batch_size=50)}.items()}
    # no_sync skips the gradient all-reduce of every first micro-batch: 10 fewer per epoch. The other
    # all-reduces (loss totals, evaluation) are the same in both runs.
    assert runs["25"]["allreduces"] - runs["25 x 2"]["allreduces"] == epochs * 10, runs
    assert runs["25 x 2"]["allreduces"] == runs["50"]["allreduces"], runs
    # Two micro-batches of 25, each loss divided by 2, give the gradient of one batch of 50.
    accumulated, large = _final_model(tmp_path / "25 x 2"), _final_model(tmp_path / "50")
    for name, tensor in large.items():
        assert torch.allclose(accumulated[name], tensor, atol=1e-5), name
    assert not torch.allclose(_final_model(tmp_path / "25")["0.weight"], large["0.weight"], atol=1e-3)
    for a, b in zip(runs["25 x 2"]["history"], runs["50"]["history"]):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)


def _lr_after(steps: int, lr: float, warmup_steps: int, total_steps: int) -> float:
    """The rate the template's composed schedule (warm-up, then cosine) gives after ``steps`` steps."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    scheduler = template.with_warmup(optimizer, cosine, warmup_steps)
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


def test_with_warmup_puts_a_linear_warmup_before_the_learners_schedule():
    lr, warmup_steps, total_steps = 0.1, 3, 10
    rates = [_lr_after(k, lr, warmup_steps, total_steps) for k in range(14)]
    # LinearLR from lr/3 to lr over 3 steps, then CosineAnnealingLR from its own step 0.
    expected = [lr * (1 / 3 + (2 / 3) * k / 3) if k < warmup_steps
                else lr / 2 * (1 + math.cos(math.pi * (k - warmup_steps) / total_steps)) for k in range(14)]
    assert rates == pytest.approx(expected, abs=1e-9)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    assert template.with_warmup(optimizer, None, 0) is None  # neither: a constant rate
    alone = template.with_warmup(optimizer, None, 4)  # warm-up alone, then lr for good
    for _ in range(6):
        optimizer.step()
        alone.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr)


def test_the_epoch_loss_weights_each_batch_by_its_size(tmp_path):
    # A rate too small to move the weights: the epoch's loss is then the initial model's mean over all
    # 1000 samples. 500 per rank in batches of 32 end in a short batch of 20, which a plain mean of
    # the batch losses would count as much as a batch of 32.
    result = run_ranks(template.train_job, 2, kwargs=dict(epochs=1, lr=1e-12, checkpoint_dir=str(tmp_path)))[0]
    torch.manual_seed(0)
    train_set, model, loss_fn = template.make_datasets()[0], template.make_model(), template.make_loss()
    x, y = train_set.tensors
    batch_losses = []
    with torch.no_grad():
        expected = loss_fn(model(x), y).item()
        for rank in (0, 1):
            order = list(DistributedSampler(train_set, num_replicas=2, rank=rank, seed=0))
            batch_losses += [loss_fn(model(x[order[i:i + 32]]), y[order[i:i + 32]]).item() for i in range(0, 500, 32)]
    assert len(batch_losses) == 32 and abs(sum(batch_losses) / 32 - expected) > 1e-4  # the two means differ
    assert result["history"][0]["loss"] == pytest.approx(expected, abs=1e-6)


def test_warmup_then_the_learners_schedule_steps_per_optimizer_step_and_resumes_mid_warmup(tmp_path):
    lr, warmup_steps, epochs = 0.05, 15, 3  # batch 50 on 2 ranks: 10 optimizer steps per epoch
    settings = dict(batch_size=50, lr=lr, warmup_steps=warmup_steps)
    straight = run_ranks(template_workers.train_with_cosine, 2,
                         kwargs=dict(epochs=epochs, checkpoint_dir=str(tmp_path / "straight"), **settings))[0]
    # Warm-up for 15 steps, then cosine over the run's other 15: the rate after each epoch's 10 steps.
    assert [h["lr"] for h in straight["history"]] == pytest.approx(
        [_lr_after(10 * (e + 1), lr, warmup_steps, 10 * epochs - warmup_steps) for e in range(epochs)], abs=1e-12)
    assert straight["history"][1]["lr"] < lr  # the cosine has taken over
    assert straight["history"][-1]["lr"] == pytest.approx(0, abs=1e-12)  # and ends at the run's last step
    # More epochs on the same checkpoint would restart the rate's rise: refused, on every rank, with what to do.
    with pytest.raises(WorkerError, match=r"--epochs 3\).*Rerun with the checkpoint's settings"):
        run_ranks(template_workers.train_with_cosine, 2,
                  kwargs=dict(epochs=epochs + 1, checkpoint_dir=str(tmp_path / "straight"), **settings))
    no_warmup = run_ranks(template.train_job, 2, kwargs=dict(epochs=1, checkpoint_dir=str(tmp_path / "none"),
                                                     batch_size=50, lr=lr))[0]
    assert no_warmup["history"][0]["loss"] != pytest.approx(straight["history"][0]["loss"], abs=1e-4)
    # A schedule added on a checkpoint written without one (the model or the job changed): another job.
    with pytest.raises(WorkerError, match="with no learning-rate schedule, this run has a schedule.*--checkpoint-dir"):
        run_ranks(template_workers.train_with_cosine, 2,
                  kwargs=dict(epochs=epochs, checkpoint_dir=str(tmp_path / "none"), **settings))

    # Stopped after epoch 1, in the middle of the warm-up, and resumed: the schedule continues where it was.
    resumed_dir = str(tmp_path / "resumed")
    with pytest.raises(WorkerError, match="stopped after epoch 1"):
        run_ranks(template_workers.train_with_cosine, 2,
                  kwargs=dict(epochs=epochs, checkpoint_dir=resumed_dir, crash_after_epoch=1, **settings))
    resumed = run_ranks(template_workers.train_with_cosine, 2,
                        kwargs=dict(epochs=epochs, checkpoint_dir=resumed_dir, **settings))[0]
    assert resumed["start_epoch"] == 1
    assert resumed["history"] == straight["history"]
    for name, tensor in _final_model(tmp_path / "straight").items():
        assert torch.equal(_final_model(tmp_path / "resumed")[name], tensor), name


def test_a_resume_with_another_lr_trains_and_records_the_saved_rate(tmp_path):
    # The optimizer's saved state brings its rate back, so a new --lr has no effect: the epoch's rate
    # and the checkpoint's settings both keep the saved one, and a third run does not see a change.
    run_ranks(template.train_job, 2, kwargs=dict(epochs=1, lr=0.05, checkpoint_dir=str(tmp_path)))
    resumed = run_ranks(template.train_job, 2, kwargs=dict(epochs=2, lr=0.5, checkpoint_dir=str(tmp_path)))
    assert [h["lr"] for h in resumed[0]["history"]] == [0.05, 0.05]
    assert _state(tmp_path / "last.pt")["settings"]["lr"] == 0.05


def test_a_refused_resume_prints_one_line_and_every_rank_exits_2_without_a_traceback(tmp_path):
    # A learner's copy with a schedule, trained 1 epoch, then asked for 2: the saved schedule would end early.
    source = TEMPLATE.read_text()
    assert source.count("    return None\n") == 1  # make_scheduler's body
    cosine = "    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)\n"
    (tmp_path / "mine.py").write_text(source.replace("    return None\n", cosine))
    _run([sys.executable, "-I", "mine.py", "--epochs", "1", "--checkpoint-dir", "c"], tmp_path)
    more = ["mine.py", "--epochs", "2", "--checkpoint-dir", "c"]
    spawned = _run([sys.executable, "-I", *more], tmp_path, returncode=2)  # mp.spawn: the ranks' exit code
    # torchrun exits 1 when a rank fails; its summary lists each rank's exit code.
    torchrun = _run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", *more], tmp_path, returncode=1)
    assert len(re.findall(r"exitcode\s*: 2 ", torchrun)) == 2, torchrun
    for out in (spawned, torchrun):
        reasons = [line for line in out.splitlines() if line.startswith("error: ")]
        assert len(reasons) == 1 and "Rerun with the checkpoint's settings" in reasons[0], out
        assert 'mine.py", line' not in out, out  # no rank's traceback
    assert "Traceback" not in spawned, spawned


def test_a_checkpoint_of_another_model_is_refused_before_any_resuming_line(tmp_path):
    # A learner's new model run in the folder of an older job: last.pt holds other shapes.
    run_ranks(template.train_job, 2, kwargs=dict(epochs=1, checkpoint_dir=str(tmp_path)))
    state = _state(tmp_path / "last.pt")
    state["model"] = {name: torch.zeros(3, *t.shape) for name, t in state["model"].items()}
    torch.save(state, tmp_path / "last.pt")
    with pytest.raises(WorkerError) as caught:
        run_ranks(template.train_job, 2, kwargs=dict(epochs=2, checkpoint_dir=str(tmp_path)), show_output=False)
    assert "does not fit this job's model" in str(caught.value), caught.value
    assert "delete it or choose another --checkpoint-dir" in str(caught.value), caught.value
    printed = "".join(caught.value.outputs[0])
    assert "resuming" not in printed, printed  # no rank resumed, so none says so


def _regression_copy(folder: pathlib.Path, target: str, metric_sum: bool = True) -> None:
    """The template edited as a learner edits it for a regression model: one output, MSE, metric "mse"
    (with ``metric_sum=False``, metric_sum's classifier body left as it is)."""
    text = TEMPLATE.read_text()
    edits = {
        "    y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()": f"    y = {target}",
        "nn.Linear(64, 2))": "nn.Linear(64, 1))",
        "return nn.CrossEntropyLoss()": "return nn.MSELoss()",
        'METRIC = "accuracy"': 'METRIC = "mse"',
    }
    for old, edit in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, edit)
    if metric_sum:  # metric_sum's whole body, the float-target check included, becomes the squared error
        last = "    return (output.argmax(1) == y).sum()\n"
        start = text.index("    if y.is_floating_point():")
        end = text.index(last, start) + len(last)
        text = text[:start] + "    return ((output - y) ** 2).sum()\n" + text[end:]
    folder.mkdir()
    (folder / "template.py").write_text(text)


def test_a_regression_copy_names_its_metric_and_stops_on_targets_of_another_shape(tmp_path):
    # Right: targets shaped (N, 1), like the output. The metric is printed and kept under its name.
    _regression_copy(tmp_path / "right", "(x[:, :4].sum(1) - x[:, 4:].sum(1)).unsqueeze(1) / 4")
    printed = _run([sys.executable, "-I", "template.py", "--epochs", "2", "--lr", "0.01"], tmp_path / "right")
    line = r"^epoch \d/2: loss [\d.]+, mse ([\d.e-]+) on 201 samples$"
    mse = [float(m) for m in re.findall(line, printed, re.MULTILINE)]
    assert len(mse) == 2 and mse[1] < mse[0], printed
    history = _state(tmp_path / "right" / "checkpoints" / "last.pt")["history"]
    assert [sorted(h) for h in history] == [["evaluated", "loss", "lr", "mse"]] * 2, history

    # The honest mistake: targets shaped (N,). torch only warns; the copy stops at the first batch, and
    # torchrun's failure summary (@record) ends with torch's words, not only an exit code.
    _regression_copy(tmp_path / "wrong", "(x[:, :4].sum(1) - x[:, 4:].sum(1)) / 4")
    printed = _run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "template.py", "--epochs", "2"],
                   tmp_path / "wrong", returncode=1)
    summary = printed[printed.index("Root Cause (first observed failure)"):]
    assert "Using a target size (torch.Size([32])) that is different to the input size (torch.Size([32, 1]))" \
        in summary, printed
    assert "epoch 1/2" not in printed, printed

    # The other honest mistake: metric_sum's classifier body left as it is. Argmax of one column is
    # always 0, which would print a plausible "mse 0" every epoch; the copy stops at the first
    # evaluation instead, naming the function to change.
    _regression_copy(tmp_path / "metric_left", "(x[:, :4].sum(1) - x[:, 4:].sum(1)).unsqueeze(1) / 4",
                     metric_sum=False)
    printed = _run([sys.executable, "-I", "template.py", "--epochs", "1"], tmp_path / "metric_left", returncode=1)
    assert "metric_sum counts a classifier's correct picks, but the targets are torch.float32" in printed, printed
    assert "make metric_sum return your metric's sum" in printed, printed
    assert "epoch 1/1" not in printed, printed


@pytest.mark.parametrize("env, world_size, gpus, expected", [
    ({}, 2, 2, True),                                      # mp.spawn: both ranks here, a GPU each
    ({}, 2, 1, False),                                     # mp.spawn on one GPU: gloo on the CPU
    ({"RANK": "0", "LOCAL_WORLD_SIZE": "2"}, 2, 1, False),  # torchrun --nproc-per-node 2 on one GPU
    ({"RANK": "0", "LOCAL_WORLD_SIZE": "2"}, 8, 2, True),   # torchrun on 4 nodes of 2 GPUs
    ({"RANK": "3"}, 4, 1, True),                           # a scheduler shows each rank its own GPU
    ({}, 2, 0, False),                                     # no GPU
])
def test_setup_job_takes_nccl_only_with_a_gpu_for_every_local_rank(monkeypatch, env, world_size, gpus, expected):
    for name in ("RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert template.gpus_for_every_rank(world_size) is expected


def test_setup_job_with_more_ranks_than_gpus_joins_on_gloo_with_the_cpu():
    results = run_ranks(template_workers.setup_job_with_one_gpu, 2)
    assert results == [{"device": "cpu", "backend": "gloo"}] * 2, results


def test_under_mp_spawn_the_template_shares_the_cores_and_leaves_a_set_thread_count_alone(monkeypatch):
    # mp.spawn sets no OMP_NUM_THREADS: each rank would use every core and the ranks fight (lesson 00).
    import torch.distributed as dist

    from ddp_lib.workers import template

    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: None)
    for name in ("RANK", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(template.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(template.os, "cpu_count", lambda: 8)
    before = torch.get_num_threads()
    try:
        template.setup_job(0, 4)
        assert torch.get_num_threads() == 2  # 8 cores shared by the 4 ranks on this machine
        torch.set_num_threads(5)
        monkeypatch.setenv("OMP_NUM_THREADS", "5")  # set by torchrun or the user: kept
        template.setup_job(0, 4)
        assert torch.get_num_threads() == 5
    finally:
        torch.set_num_threads(before)


def test_two_python_template_jobs_at_once_each_pick_a_free_port_of_their_own(tmp_path):
    # No MASTER_PORT, as a learner types it: two jobs on one port would collide (lesson 00's busy port).
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")}
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        folder.mkdir()
        shutil.copy(TEMPLATE, folder / "template.py")
    jobs = [subprocess.Popen([sys.executable, "-I", "template.py", "--epochs", "1"], cwd=folder, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            for folder in folders]
    try:
        outputs = [job.communicate(timeout=240)[0] for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
    for job, output in zip(jobs, outputs):
        assert job.returncode == 0, output[-3000:]
        assert re.search(r"^epoch 1/1:", output, re.MULTILINE), output[-3000:]
