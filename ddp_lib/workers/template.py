"""A template for your own training job under DDP. Copy this one file (it needs only torch). Fill in
what is marked "YOUR JOB": make_datasets, make_model, make_loss, METRIC and metric_sum, make_optimizer
(make_scheduler too, for a learning-rate schedule), and pick --lr for your optimizer.
Run it with

    python template.py --epochs 5                                        # mp.spawn: 2 processes (or one per GPU)
    torchrun --standalone --nproc-per-node 2 template.py --epochs 5      # torchrun starts the processes
    python -m ddp_lib run template:train_job --world-size 2 --epochs 5   # ddp_lib's launcher

Run each from this file's directory. With ddp_lib's launcher, "template:train_job" means the function
train_job in the file template.py found there (a copy you renamed to mine.py is "mine:train_job"); "run
template" without ":train_job" runs ddp_lib's own unedited template instead, not your copy.

Rank 0 saves a checkpoint after every epoch; a new run with the same --checkpoint-dir continues
from it and says so (torchrun --max-restarts 3 restarts a crashed job, which then resumes by itself;
on torch 2.13 also set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, or a restart often fails: lesson 06).
Only rank 0 reads and writes the checkpoint, so the directory need not be shared while rank 0 runs on
the machine that wrote it: one machine, or torchrun --node-rank (static rendezvous). Under torchrun's
c10d rendezvous the ranks are dealt again at each restart: when the set of hosts changes (a requeue, a
node gone), another machine can become rank 0, find no checkpoint and start from epoch 1: there, use a
shared directory.
python template.py picks a free port for its ranks (MASTER_PORT, where set, instead), so two such jobs
on one machine need nothing more.
A resume with a schedule (make_scheduler) must keep the settings that set its length (--epochs,
batch size, world size, --accumulate, --warmup-steps): otherwise rank 0 says what to do, and every
rank exits with code 2.
--warmup-steps N raises the learning rate linearly over the first N optimizer steps, before the
schedule make_scheduler returns (if any); --accumulate K
adds up the gradients of K batches per rank before each optimizer step and all-reduces them once,
in the K-th backward (global batch: world size x batch size x K).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset, TensorDataset

# ==== YOUR JOB: replace the bodies of make_datasets, make_model, make_loss, metric_sum, make_optimizer =
# (make_scheduler too, for a learning-rate schedule), and set METRIC. A regression's targets take the
# output's shape, (N, 1), not (N,): the loss would broadcast them (the job stops with torch's warning).
# --lr's default, 0.05, suits make_optimizer's SGD: with another optimizer, pass a rate that suits it
# (Adam wants about 1e-3). After changing the model, delete the old --checkpoint-dir or give a new
# one: its checkpoint fits the old model only.


def make_datasets() -> tuple[Dataset, Dataset]:
    """The training set and the evaluation set. Every rank calls this and must get the same data:
    read the same files, or generate from a fixed seed, as here."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1201, 8, generator=g)
    y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()  # two classes: which half of the features is larger
    return TensorDataset(x[:1000], y[:1000]), TensorDataset(x[1000:], y[1000:])


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))


def make_loss() -> nn.Module:
    return nn.CrossEntropyLoss()  # the mean over the batch: DDP then averages these means


METRIC = "accuracy"  # the name of metric_sum's metric, in each epoch's line and the history


def metric_sum(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The batch's sum of METRIC; evaluate() divides the total by the samples counted. Here a
    classifier's: the rows whose highest output is y's class. For a regression, return
    ((output - y) ** 2).sum() and set METRIC = "mse"."""
    if y.is_floating_point():  # float targets mean another model, whose metric this is not
        raise ValueError(f"metric_sum counts a classifier's correct picks, but the targets are {y.dtype}: for "
                         "another model, make metric_sum return your metric's sum (for a regression, "
                         "((output - y) ** 2).sum()) and rename METRIC")
    return (output.argmax(1) == y).sum()


def make_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def make_scheduler(optimizer: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LRScheduler | None:
    """A learning-rate schedule stepped once per optimizer step, or None for a constant rate.
    steps counts the optimizer steps this schedule runs: the whole run's, less the --warmup-steps N
    that come before it. For example torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    ends its cosine at the run's last step. It is checkpointed."""
    return None


# ==== THE DDP LOOP: the same for any model =====================================================


def train_job(rank: int, world_size: int, epochs: int = 5, batch_size: int = 32, lr: float = 0.05,
          seed: int = 0, checkpoint_dir: str = "checkpoints", warmup_steps: int = 0, accumulate: int = 1) -> dict:
    """Train under DDP, evaluate after every epoch, checkpoint on rank 0, resume from the checkpoint
    that rank 0 finds (it sends its contents to the other ranks).

    Args:
        epochs: number of epochs to reach, counting those a resumed checkpoint already holds.
        batch_size: samples per rank per batch (global batch = world_size x this x accumulate).
        lr: learning rate.
        seed: seed of the initial weights and of the shuffle; rank r's later random numbers
            (dropout, augmentation) come from seed + r.
        checkpoint_dir: where rank 0 keeps last.pt; a run finding one there continues from it.
        warmup_steps: optimizer steps over which the learning rate rises linearly to lr (0: none).
        accumulate: batches per optimizer step; gradients are all-reduced once per step.

    Returns {"rank", "start_epoch", "history" (per epoch: loss, METRIC, samples evaluated, lr)}.
    """
    # A target shaped (N,) against an output shaped (N, 1) broadcasts to an (N, N) loss: torch only
    # warns, and the model learns the wrong thing. Stop at the first batch instead.
    warnings.filterwarnings("error", message="Using a target size", category=UserWarning)
    device = setup_job(rank, world_size)
    try:
        # One seed on every rank: the same initial weights (DDP would broadcast rank 0's anyway).
        torch.manual_seed(seed)
        train_set, eval_set = make_datasets()
        model = make_model().to(device)
        # From here on each rank draws its own random numbers: with one seed, every rank would drop
        # the same units and augment its samples the same way.
        torch.manual_seed(seed + rank)
        # One shuffled permutation per epoch, the same on every rank (the sampler has its own seed);
        # each rank reads its own slice. On a GPU, num_workers=4, pin_memory=True load faster.
        sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)
        optimizer = make_optimizer(model, lr)
        total_steps = epochs * -(-len(loader) // accumulate)  # optimizer steps in the whole run
        schedule_steps = max(total_steps - warmup_steps, 1)  # the schedule starts after the warm-up
        schedule = make_scheduler(optimizer, schedule_steps)
        scheduler = with_warmup(optimizer, schedule, warmup_steps)
        loss_fn = make_loss()
        checkpoint = os.path.join(checkpoint_dir, "last.pt")
        # A resume compares these with the checkpoint's. schedule_steps: a saved schedule keeps its length.
        settings = {"world_size": world_size, "batch_size": batch_size, "lr": lr, "seed": seed,
                    "warmup_steps": warmup_steps, "accumulate": accumulate, "epochs": epochs,
                    "schedule_steps": schedule_steps if schedule is not None else None}
        parts = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
        # Before DDP wraps the model: rank 0 reads the file, every rank loads what it read.
        start_epoch, history = load_checkpoint(checkpoint, parts, settings, rank)
        if rank == 0 and start_epoch >= epochs:
            print(f"nothing left to train: {checkpoint} holds {start_epoch} epochs, --epochs is {epochs}", flush=True)
        ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

        for epoch in range(start_epoch, epochs):
            sampler.set_epoch(epoch)  # without it, every epoch reads the same order
            ddp_model.train()
            totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, samples
            for i, (x, y) in enumerate(loader):
                x, y = x.to(device), y.to(device)
                first = i - i % accumulate  # the first batch of this optimizer step
                batches = min(accumulate, len(loader) - first)  # fewer at the end of an epoch
                step_now = i == first + batches - 1
                # no_sync: this backward only adds into .grad; the step's last backward all-reduces the sum.
                # The forward must be inside it too: DDP decides during the forward.
                with contextlib.nullcontext() if step_now else ddp_model.no_sync():
                    loss = loss_fn(ddp_model(x), y)
                    (loss / batches).backward()  # DDP averages the gradients in the step's last backward
                if step_now:
                    optimizer.step()
                    optimizer.zero_grad()
                    if scheduler is not None:
                        scheduler.step()  # once per optimizer step
                # Weighted by the batch's size, so a short last batch counts for its samples only.
                totals[0] += loss.detach().double() * len(y)
                totals[1] += len(y)
            dist.all_reduce(totals)  # the epoch's mean loss: (sum of loss x n) / (sum of n), over every rank
            metric, evaluated = evaluate(model, eval_set, rank, world_size, device)
            history.append({"loss": round((totals[0] / totals[1]).item(), 6), METRIC: round(metric, 6),
                            "evaluated": evaluated, "lr": optimizer.param_groups[0]["lr"]})
            if rank == 0:
                print(f"epoch {epoch + 1}/{epochs}: loss {history[-1]['loss']:.4f}, "
                      f"{METRIC} {metric:.4g} on {evaluated} samples", flush=True)
                # The unwrapped model: keys without "module.", loadable with or without DDP.
                state = {name: part.state_dict() for name, part in parts.items() if part is not None}
                save_checkpoint(checkpoint, {**state, "epoch": epoch + 1, "history": history, "settings": settings})
            dist.barrier()  # past it, every rank knows this epoch's checkpoint is saved
        return {"rank": rank, "start_epoch": start_epoch, "history": history}
    finally:
        dist.destroy_process_group()


def with_warmup(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler | None,
                warmup_steps: int) -> torch.optim.lr_scheduler.LRScheduler | None:
    """One scheduler, stepped once per optimizer step: warmup_steps steps whose rate rises linearly
    from lr / warmup_steps to lr, then ``scheduler`` from its start (or lr itself, if it is None)."""
    if warmup_steps == 0:
        return scheduler
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, 1 / warmup_steps, total_iters=warmup_steps)
    if scheduler is None:
        return warmup  # it stays at lr once warm-up is over
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, scheduler], milestones=[warmup_steps])


def evaluate(model: nn.Module, dataset: Dataset, rank: int, world_size: int,
             device: torch.device) -> tuple[float, int]:
    """METRIC over ``dataset``, every sample counted exactly once: metric_sum's total divided by the
    samples counted, and how many were counted.
    Rank r takes samples r, r + world_size, ... (no padding, unlike DistributedSampler), and one
    all-reduce adds up the counts. It runs the plain model, not the DDP wrapper: for a model with
    buffers (batch norm's running statistics), the wrapper's first forward after training starts a
    broadcast of them that every rank must join, and a rank with no evaluation batch (fewer samples
    than ranks), or evaluation on some ranks only, would leave it waiting. The plain model starts
    no collective."""
    shard = Subset(dataset, range(rank, len(dataset), world_size))
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64, device=device)  # metric_sum's total, samples
    with torch.no_grad():
        for x, y in DataLoader(shard, batch_size=256):
            x, y = x.to(device), y.to(device)
            counts[0] += metric_sum(model(x), y)
            counts[1] += len(y)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item(), int(counts[1].item())


def save_checkpoint(path: str, state: dict) -> None:
    """Write ``state`` so that ``path`` always holds a whole checkpoint, the old one or the new."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename, so a power cut cannot leave an empty file
    os.replace(tmp, path)  # atomic on one filesystem: a crash before it leaves the old checkpoint
    if os.name == "posix":  # the rename is an entry in the directory: fsync that too (Windows cannot open one)
        folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def load_checkpoint(path: str, parts: dict, settings: dict, rank: int) -> tuple[int, list]:
    """Load ``path`` into each of ``parts`` (model, optimizer, scheduler; None skipped); return
    (epochs done, history), or (0, []) if rank 0 finds no file. Rank 0 alone decides and reads; a
    broadcast gives every rank the same answer, so ranks that see different files (no shared disk)
    cannot disagree and hang. Rank 0 warns when the checkpoint was written with other settings.
    Every rank refuses to resume when a schedule would get another length than the saved one: its
    saved state keeps the old length, so the rate would rise again past the old end.

    This resumes at an epoch boundary: the sampler's order depends on seed + epoch only. A job that
    must continue bit for bit with random numbers drawn in training (dropout, augmentation) also
    saves each rank's generators: torch.get_rng_state(), torch.cuda.get_rng_state() on a GPU, and
    random's and numpy's if it uses them (each DataLoader pass also draws a seed from torch's).
    One that resumes mid-epoch also saves the step and skips that many batches."""
    state, refusal = None, None
    if rank == 0 and os.path.exists(path):
        # map_location="cpu": the broadcast below pickles what it sends, and a GPU tensor would be
        # unpickled onto rank 0's GPU on every receiving rank; load_state_dict copies each onto the model's device.
        # weights_only: tensors and plain data only, never code the file names.
        state = torch.load(path, map_location="cpu", weights_only=True)
        saved = state.get("settings", settings)
        length = ("epochs", "schedule_steps")  # a longer run without a schedule may resume

        def others(s: dict) -> dict:  # the settings warned about together; lr has a line of its own
            return {k: v for k, v in s.items() if k not in (*length, "lr")}

        if saved.get("lr", settings["lr"]) != settings["lr"]:
            warnings.warn(f"--lr {settings['lr']} is not used: the resumed optimizer keeps the saved learning "
                          f"rate {saved['lr']} (for a new rate, give another --checkpoint-dir)", stacklevel=2)
        if others(saved) != others(settings):
            warnings.warn(f"{path} was written with {saved}, this run has {settings}", stacklevel=2)
        # The optimizer's saved state brings back the saved rate, whatever --lr says: record that one.
        settings["lr"] = saved.get("lr", settings["lr"])
        if None in (saved.get("schedule_steps"), settings["schedule_steps"]) and (
                saved.get("schedule_steps") != settings["schedule_steps"]):
            had, has = ("a", "no") if settings["schedule_steps"] is None else ("no", "a")
            refusal = (f"{path} was written by a run with {had} learning-rate schedule, this run has {has} "
                       "schedule: it is another job. Start it with another --checkpoint-dir.")
        elif saved.get("schedule_steps") != settings["schedule_steps"]:
            refusal = (f"{path} holds a schedule of {saved.get('schedule_steps')} steps "
                       f"(--epochs {saved.get('epochs')}), this run's settings give {settings['schedule_steps']} "
                       f"(--epochs {settings['epochs']}): resumed, the saved schedule would not end at this run's "
                       f"last step. Rerun with the checkpoint's settings {saved}, or start a new run with another "
                       "--checkpoint-dir.")
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr, flush=True)  # once, before any rank leaves
    # Only rank 0 has read the file, so it sends what it found (or None) to every rank: pickled
    # Python objects, on the CPU, so only for checkpoints that fit in memory.
    box = [state, refusal]
    dist.broadcast_object_list(box, src=0)
    state, refusal = box
    if refusal is not None:
        raise ResumeRefused(refusal)  # on every rank, so none waits for the others
    if state is None:
        return 0, []
    for name, part in parts.items():
        if part is None or state.get(name) is None:
            continue
        try:
            part.load_state_dict(state[name])  # the optimizer moves its state next to each parameter
        except (RuntimeError, ValueError, KeyError) as exc:
            raise RuntimeError(f"{path} does not fit this job's {name} (written by another one?): delete it or "
                               f"choose another --checkpoint-dir. {exc}") from None
    if rank == 0:  # only now: a file that does not fit raised above, and no rank resumed
        print(f"resuming from {path}: {state['epoch']} epochs done", flush=True)
    return state["epoch"], state["history"]


class ResumeRefused(RuntimeError):
    """The checkpoint belongs to a run with other settings; rank 0 has printed why and what to do."""


def setup_job(rank: int, world_size: int) -> torch.device:
    """Join the process group; return this rank's device (its own GPU, or the CPU)."""
    # torchrun, ddp_lib's launcher and this file's __main__ set these. A scheduler that starts each rank
    # itself may not: then the tutorial's defaults, the same on every rank.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "12355")
    if "OMP_NUM_THREADS" not in os.environ:  # mp.spawn: share the cores (lesson 00; torchrun sets 1 for 2+ ranks)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_ranks(world_size)))
    if gpus_for_every_rank(world_size):
        local_rank = int(os.environ.get("LOCAL_RANK", rank))  # the rank's index on this machine
        # Lesson 03's device rule: the modulo also fits a scheduler that shows each rank one GPU only.
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=device)
    else:  # no GPU, or fewer GPUs than ranks on this machine: nccl refuses two ranks on one GPU
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        if rank == 0 and torch.cuda.is_available():
            print(f"{torch.cuda.device_count()} GPU(s) for {local_ranks(world_size)} ranks on this machine: "
                  "gloo on the CPU", flush=True)
    return device


def local_ranks(world_size: int) -> int:
    """The ranks on this machine: LOCAL_WORLD_SIZE where torchrun or ddp_lib's launcher set it; all of
    them under mp.spawn (no RANK set); else 1 (a scheduler that starts each rank itself)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", 1 if "RANK" in os.environ else world_size))


def gpus_for_every_rank(world_size: int) -> bool:
    """True where CUDA shows at least one GPU for each rank on this machine (then nccl, one GPU each)."""
    return torch.cuda.is_available() and torch.cuda.device_count() >= local_ranks(world_size)


@record  # under torchrun, an exception that ends a rank goes into torchrun's failure summary (lesson 06)
def run_rank(rank: int, world_size: int, *settings) -> None:
    """One rank started from the command line: train_job, then leave with exit code 0, or 2 for a
    refused resume (rank 0 has printed the reason; no rank prints a traceback)."""
    try:
        train_job(rank, world_size, *settings)
        code = 0
    except ResumeRefused:
        code = 2
    # Now and then a rank aborts in Python's teardown after its work is done ("terminate called without
    # an active exception", lesson 02's "Deeper: ... the rare abort at exit"), and torchrun counts that as a
    # failure. The checkpoint is saved and every line printed: leave without the teardown. os._exit also
    # skips atexit handlers, logging's final flush among them: flush your own log handlers before it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Train under DDP (see the top of this file).")
    parser.add_argument("--epochs", type=int, default=5,
                        help="epochs to reach, counting those a resumed checkpoint holds (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per batch (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.05,
                        help="learning rate, chosen for make_optimizer's SGD; for Adam try 1e-3 "
                             "(default: %(default)s)")
    parser.add_argument("--checkpoint-dir", default="checkpoints",
                        help="where last.pt is saved; a last.pt already there is resumed (default: %(default)s)")
    parser.add_argument("--world-size", type=int, default=torch.cuda.device_count() or 2,
                        help="processes to start without torchrun (default: one per GPU, or 2; "
                             "more ranks than GPUs: gloo on the CPU)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the weights and the data order (default: %(default)s)")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="optimizer steps of linear warm-up (default: %(default)s)")
    parser.add_argument("--accumulate", type=int, default=1,
                        help="batches per optimizer step, no_sync between (default: %(default)s)")
    args = parser.parse_args()
    # In train_job's order: mp.spawn passes arguments by position, after the rank.
    settings = (args.epochs, args.batch_size, args.lr, args.seed, args.checkpoint_dir, args.warmup_steps,
                args.accumulate)
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), *settings)
    else:  # started by python: start the ranks here, run_rank(rank, world_size, *settings) in each
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:  # a free port, picked once here: every rank inherits it (lesson 02)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
        try:
            mp.spawn(run_rank, args=(args.world_size, *settings), nprocs=args.world_size)
        except mp.ProcessExitedException as e:
            if e.exit_code != 2:
                raise
            sys.exit(2)  # a refused resume: rank 0 has printed why
