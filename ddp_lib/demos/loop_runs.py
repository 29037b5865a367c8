"""Lesson 09's measured runs of ``ddp_lib/workers/training_loop.py``'s ``train_loop``: the same loop,
recording what the lesson plots (the dtypes autocast gives and DDP sends, each step's gradient norm
and time, the graphs torch.compile makes), with the comm hooks the lesson compares and the wrong
clipping it shows (``clip="before_sync"``). With the defaults it computes what ``train_loop``
computes (tests/test_lesson09.py).

    run_ranks(measured_runs, 2, kwargs=dict(runs={"bf16": dict(precision="bf16")}))
"""

import logging
import os
import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_lib.demos import plain_train
from ddp_lib.process_group import device_ids_for, process_group
from ddp_lib.workers.shared import make_moons
from ddp_lib.workers.training_loop import EVAL_SEED, LoopNet, evaluate, setup_logging


def plain_script(rank: int, world_size: int, directory: str, options: list[str]) -> None:
    """Run ``plain_train.py`` as torchrun would, in ``directory`` (where it writes its checkpoint),
    with these command-line ``options``. ``launch`` sets the variables the script reads, RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, as torchrun does."""
    os.chdir(directory)  # the script writes its checkpoint where it was started from
    plain_train.main(options)


def measured_runs(rank: int, world_size: int, runs: dict[str, dict]) -> dict:
    """``train_loop_measured`` once per entry of ``runs`` (a name -> its keyword arguments), one after
    the other in one job: one launch instead of one per run, the same results.

    Returns {name: train_loop_measured's result on this rank}.
    """
    with process_group(rank, world_size):  # each run joins this group instead of creating one
        return {name: train_loop_measured(rank, world_size, **kwargs) for name, kwargs in runs.items()}


def train_loop_measured(rank: int, world_size: int, epochs: int = 4, batch_size: int = 16, lr: float = 0.1,
               seed: int = 0, precision: Literal["fp32", "bf16", "fp16"] = "fp32",
               comm_hook: Literal["none", "allreduce", "bf16_compress"] = "allreduce",
               max_norm: float | None = None, clip: Literal["after_sync", "before_sync"] = "after_sync",
               compile: bool = False, compile_backend: str = "inductor", hidden: int = 32,
               drop_last: bool = True) -> dict:
    """``ddp_lib.workers.training_loop.train_loop``, measured, with a comm hook and a wrong clipping to choose.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        epochs: epochs over the 512 training samples.
        batch_size: samples per rank per step (global batch = world_size x batch_size).
        lr: learning rate of SGD with momentum 0.9.
        seed: seed of the initial weights (the same on every rank) and of the shuffle.
        precision: "fp32", or autocast to "bf16" or "fp16" (fp16 with a GradScaler).
        comm_hook: "allreduce" (the default: torch's allreduce_hook, recording the dtype it sends),
            "none" (DDP's built-in all-reduce, the same sums) or "bf16_compress" (averaged in bfloat16,
            see ``bf16_compress``).
        max_norm: clip the gradient norm to this (None: no clipping).
        clip: "after_sync" clips the averaged gradient; "before_sync" (wrong) clips each rank's own
            gradient inside no_sync, then averages by hand.
        compile: compile the model with torch.compile, then wrap it in DDP.
        compile_backend: torch.compile's backend: "inductor" (generates fused C++ or GPU kernels;
            needs a C++ compiler on a CPU), "aot_eager" (traces forward and backward, runs them op
            by op) or "eager" (runs the graphs dynamo captured as they are).
        hidden: width of the hidden layer.
        drop_last: the DataLoader drops each epoch's last, short batch (True, as ``train_loop``);
            False keeps it, a batch of another shape (a compiled model recompiles for it).

    Returns {"rank", "losses" (per epoch, mean over all ranks' samples), "grad_norms" (this rank's
    norm before clipping, per step), "dtypes" (of parameters, logits, loss, gradients, and what the
    comm hook sent), "step_seconds" (per step), "accuracy" (held-out, exact), "scale" (the
    GradScaler's final scale, or None), "params" (flattened), "compiled_graphs" (graphs handed to
    the compile backend: with DDP, one per piece DDPOptimizer cut; 0 without compile)}.
    """
    with process_group(rank, world_size) as device:
        log = setup_logging(rank)
        torch.manual_seed(seed)
        dataset = make_moons()
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last)
        model = LoopNet(hidden).to(device)
        compiled_graphs: list[torch.fx.GraphModule] = []
        if compile:  # compile the module, then wrap it, as train_loop does
            step_module = torch.compile(model, backend=counting_backend(compile_backend, compiled_graphs))
        else:
            step_module = model
        ddp_model = DDP(step_module, device_ids=device_ids_for(device))
        hook_state: dict = {"sent": set()}
        if comm_hook == "allreduce":
            ddp_model.register_comm_hook(hook_state, recording_allreduce)
        elif comm_hook == "bf16_compress":
            ddp_model.register_comm_hook(hook_state, bf16_compress)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        # fp16 has a narrow exponent range: small gradients underflow unless the loss is scaled.
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        loss_fn = nn.CrossEntropyLoss()

        losses, grad_norms, step_seconds, dtypes = [], [], [], {}
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            totals = torch.zeros(2, dtype=torch.float64, device=device)
            for x, y in loader:
                start = time.perf_counter()
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad(set_to_none=True)
                clip_alone = max_norm is not None and clip == "before_sync"
                # no_sync must cover the forward: DDP decides there whether backward all-reduces.
                with ddp_model.no_sync() if clip_alone else nullcontext():
                    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                        logits = ddp_model(x)
                        loss = loss_fn(logits, y)
                    scaler.scale(loss).backward()  # DDP averages the gradients here, unless in no_sync
                if clip_alone:  # wrong: each rank clips its own gradient, by its own factor
                    scaler.unscale_(optimizer)
                    grad_norms.append(nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
                    for p in model.parameters():  # averaged only now, after each rank clipped alone
                        dist.all_reduce(p.grad)
                        p.grad /= world_size
                else:
                    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                    norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
                    if max_norm is not None:
                        nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, norm)
                    grad_norms.append(norm.item())
                dtypes.setdefault("parameters", str(next(model.parameters()).dtype).removeprefix("torch."))
                dtypes.setdefault("logits", str(logits.dtype).removeprefix("torch."))
                dtypes.setdefault("loss", str(loss.dtype).removeprefix("torch."))
                dtypes.setdefault("gradients", str(next(model.parameters()).grad.dtype).removeprefix("torch."))
                scaler.step(optimizer)  # skips the step if a gradient is inf/nan (fp16 overflow)
                scaler.update()
                step_seconds.append(time.perf_counter() - start)
                totals[0] += loss.detach().double() * len(y)
                totals[1] += len(y)
            dist.all_reduce(totals)
            losses.append(round((totals[0] / totals[1]).item(), 6))
            log.info("epoch %d/%d loss %.4f", epoch + 1, epochs, losses[-1])

        accuracy, _ = evaluate(model, make_moons(101, seed=EVAL_SEED), rank, world_size, device)
        dtypes["all_reduced"] = sorted(hook_state["sent"])
        return {"rank": rank, "losses": losses, "grad_norms": [round(n, 6) for n in grad_norms],
                "dtypes": dtypes, "step_seconds": step_seconds, "accuracy": accuracy,
                "scale": scaler.get_scale() if scaler.is_enabled() else None,
                "params": torch.cat([p.detach().flatten() for p in model.parameters()]).cpu().tolist(),
                "compiled_graphs": len(compiled_graphs)}


def recording_allreduce(state: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's own ``allreduce_hook`` (average the bucket), after noting the dtype it sends."""
    state["sent"].add(str(bucket.buffer().dtype).removeprefix("torch."))
    return default_hooks.allreduce_hook(None, bucket)


def bf16_compress(state: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket in bfloat16, then copy the result back into the float32 bucket: the same
    computation as torch's ``bf16_compress_hook``, which DDP refuses (by the hook's name) unless
    torch was built for CUDA or ROCm with NCCL 2.10+, or an XPU with XCCL is available."""
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size())  # half the bytes on the wire
    state["sent"].add(str(compressed.dtype).removeprefix("torch."))

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        return buffer.copy_(fut.value()[0])

    return dist.all_reduce(compressed, async_op=True).get_future().then(decompress)


def counting_backend(name: str, graphs: list[torch.fx.GraphModule]) -> Callable:
    """torch.compile's backend ``name`` ("inductor", "aot_eager", ...), appending each graph dynamo
    hands it to ``graphs``: with DDP and optimize_ddp, one graph per piece DDPOptimizer cuts."""
    compile_graph = torch._dynamo.lookup_backend(name)  # an unknown name: torch's InvalidBackend

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable:
        graphs.append(gm)
        return compile_graph(gm, example_inputs)

    return backend


def hide_profiler_skip_warning() -> None:
    """Hide the warning dynamo logs once when it skips the profiler range that DDP's forward opens
    (logger ``torch._dynamo.variables.ctx_manager``); its errors still show."""
    logging.getLogger("torch._dynamo.variables.ctx_manager").setLevel(logging.ERROR)


def compile_timing(step_seconds: list[float], warmup: int = 2) -> dict:
    """The first step (where torch.compile compiles) and the median of the steps after ``warmup``."""
    return {"first_step_s": step_seconds[0], "steady_step_s": statistics.median(step_seconds[warmup:])}


def step_time_lines(runs: dict[str, dict], warmup: int = 2) -> list[str]:
    """One line per run of ``{name: run}``: its first step, its steady step (``compile_timing``) and the
    middle half of its steps after ``warmup`` (the first to the third quartile)."""
    lines = []
    for name, run in runs.items():
        first_step, steady_step = compile_timing(run["step_seconds"], warmup).values()
        q1, _, q3 = statistics.quantiles(run["step_seconds"][warmup:], n=4)
        lines.append(f"{name:>9}: first step {first_step:.3f} s, steady step (median after {warmup}) "
                     f"{steady_step * 1000:.2f} ms, middle half of those steps {q1 * 1000:.2f} to {q3 * 1000:.2f} ms")
    return lines


def accumulate_fp32_and_fp16(rank: int, world_size: int) -> dict:
    """``accumulate_and_clip`` in float32, then in fp16 with a GradScaler, in one job.
    Returns {"fp32": its result on this rank, "fp16": ...}."""
    from ddp_lib.workers.training_loop import accumulate_and_clip

    with process_group(rank, world_size):  # each run joins this group instead of creating one
        return {precision: accumulate_and_clip(rank, world_size, precision=precision)
                for precision in ("fp32", "fp16")}


EVAL_WAYS = ("none", "drop_last", "count_real", "subset")


def evaluate_each_way(rank: int, world_size: int, n_eval: int = 11, fixes: tuple[str, ...] = EVAL_WAYS) -> dict:
    """``evaluate_padded`` once per way of counting (by default "none", "drop_last", "count_real",
    "subset"), in one job. Returns {fix: its result on this rank}."""
    from ddp_lib.workers.training_loop import evaluate_padded

    with process_group(rank, world_size):
        return {fix: evaluate_padded(rank, world_size, n_eval=n_eval, fix=fix) for fix in fixes}


def compile_jobs(rank: int, world_size: int, settings: list[dict], timed: dict[str, dict]) -> dict:
    """The compile section's main-line runs, in one job: ``compiled_graphs_for(settings)`` ("graphs"),
    ``measured_runs(timed)`` ("timed") and ``allreduces_during_backward`` ("overlap"). Each setting holds
    ``bucket_cap_mb`` and ``split``: dynamo's setting ``torch._dynamo.config.optimize_ddp``."""
    from ddp_lib.demos.compiled_overlap import allreduces_during_backward
    from ddp_lib.workers.compiled import compiled_graphs_for

    settings = [{"bucket_cap_mb": s["bucket_cap_mb"], "optimize_ddp": s["split"]} for s in settings]
    with process_group(rank, world_size):
        return {"graphs": compiled_graphs_for(rank, world_size, settings=settings),
                "timed": measured_runs(rank, world_size, runs=timed),
                "overlap": allreduces_during_backward(rank, world_size)}


def compile_split_lines(section: list[dict], names: tuple[str, str] = ("split at buckets", "one graph")) -> list[str]:
    """What the compile section's job shows, as printable lines: ``section`` is ``compile_jobs``' result
    on each rank, run with two settings, the split at buckets first (``optimize_ddp=True``), then one
    graph (``optimize_ddp=False``). Per setting and rank: the graphs dynamo handed the backend, the
    buckets DDP all-reduced, and how many all-reduces started before the last backward graph ended;
    then the verdicts (True or False)."""
    split_name, whole_name = names
    lines, graphs, overlap = [], {split_name: [], whole_name: []}, {split_name: [], whole_name: []}
    for r in section:
        for i, (name, flag) in enumerate(((split_name, True), (whole_name, False))):
            g, o = r["graphs"][i], r["overlap"][f"optimize_ddp={flag}"]
            graphs[name].append(g)
            overlap[name].append(o)
            lines.append(f"{name:>16}, rank {g['rank']}: {len(g['graphs'])} graph(s) of parameter bytes "
                         f"{[x['bytes'] for x in reversed(g['graphs'])]}; DDP all-reduced {g['buckets']}; "
                         f"{o['started_during_backward']} of {o['allreduces']} all-reduces started "
                         "before the last backward graph ended")
    # both lists start at the output: dynamo hands the pieces over in forward order
    per_bucket = all([x["bytes"] for x in reversed(g["graphs"])] == g["buckets"] and len(g["buckets"]) > 1
                     for g in graphs[split_name])
    lines.append(f"{split_name}: one graph per DDP bucket, holding that bucket's bytes: {per_bucket}")
    in_one = all(len(g["graphs"]) == 1 and g["graphs"][0]["bytes"] == sum(g["buckets"]) for g in graphs[whole_name])
    lines.append(f"{whole_name}: every parameter in one graph: {in_one}")
    lines.append(f"{split_name}: all-reduces start while backward still has graphs to run: "
                 f"{all(o['started_during_backward'] > 0 for o in overlap[split_name])}")
    lines.append(f"{whole_name}: every all-reduce waits for the one backward graph: "
                 f"{all(o['started_during_backward'] == 0 for o in overlap[whole_name])}")
    gap = max(g["max_diff"] for results in graphs.values() for g in results)
    lines.append(f"both: parameters after 2 steps equal the uncompiled twin's within 1e-6: {gap < 1e-6}")
    return lines


def clip_norm_lines(one: dict, after: list[dict], before: list[dict], max_norm: float, steps: int = 4) -> list[str]:
    """The clipping section's gradient norms, as printable lines: the first ``steps`` norms of one
    process on the global batch (``one``), then of each rank clipped after the sync (``after``) and
    before it (``before``), both lists in rank order; last, how many steps after the sync had a norm
    above ``max_norm``."""
    lines = [f"one process:       gradient norms of the first steps {one['grad_norms'][:steps]}"]
    for way, runs in (("after", after), ("before", before)):
        lines += [f"{way} sync, rank {r['rank']}: gradient norms of the first steps {r['grad_norms'][:steps]}"
                  for r in runs]
    norms = after[0]["grad_norms"]
    lines.append(f"{sum(n > max_norm for n in norms)} of {len(norms)} steps had a norm above {max_norm}, "
                 "and were clipped")
    return lines


def clip_verdict_lines(one: dict, after: list[dict], before: list[dict]) -> list[str]:
    """The clipping section's verdicts: how far each way's final parameters (rank 0's) are from one
    process on the global batch (``one``), and whether the ranks clipped before the sync still agree."""
    lines = []
    for way, r in (("after", after[0]), ("before", before[0])):
        diff = max_param_diff(r, one)
        size = f"{diff:.0e}" if diff >= 1e-5 else "below 1e-5"  # below it, float rounding: its size varies by run
        lines.append(f"clipped {way} sync: max parameter difference from one process {size}; "
                     f"below 1e-5: {diff < 1e-5}")
    lines.append(f"clipped before sync, the ranks still agree: {before[0]['params'] == before[1]['params']}")
    return lines


def max_param_diff(run: dict, reference: dict) -> float:
    """The largest absolute difference between the final parameters of two runs."""
    return (torch.tensor(run["params"]) - torch.tensor(reference["params"])).abs().max().item()


def failure_lines(failure) -> list[str]:
    """One line per failed rank of a ``WorkerError``, in rank order, with addresses and ports
    (``[host]:port``) replaced by ``[...]`` so that runs compare line by line."""
    return [f"rank {rank}: " + re.sub(r"\[[^]]*\]:?[0-9]*", "[...]", line)
            for rank, line in sorted(failure.failures.items())]


def count_graphs(model: nn.Module, wrap: Callable, batch: torch.Tensor) -> tuple[int, nn.Module]:
    """How many graphs torch.compile captures in one training step: ``wrap(model, backend)`` compiles
    (and wraps) ``model`` with a counting backend (the eager one), then a forward and backward run on
    ``batch``. 0 means nothing compiled, silently. Returns the count and what ``wrap`` returned.
    Under DDP, call it inside a process group."""
    torch.compiler.reset()  # forget the graphs compiled before
    graphs: list[torch.fx.GraphModule] = []
    wrapped = wrap(model, counting_backend("eager", graphs))
    wrapped(batch).sum().backward()
    return len(graphs), wrapped


@contextmanager
def _compile_group(quiet: bool = True) -> Iterator[None]:
    """A one-process gloo group (a ``HashStore``, in memory), enough for DDP to wrap a model; destroyed
    on the way out. With ``quiet``, dynamo's once-only warning about DDP's profiler range is hidden."""
    if quiet:
        hide_profiler_skip_warning()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def compile_order_lines(make_model: Callable[[], nn.Module], ways: dict[str, Callable], name: str | None = None,
                        keys: bool = True) -> list[str]:
    """The order-of-compile section's lines: for each entry of ``ways``, a name and its
    ``wrap(model, backend)``, a fresh ``make_model()`` is wrapped, stepped once on 16 two-feature
    samples in a one-process gloo group (a ``HashStore``, in memory), and its graphs counted. Each line
    starts with ``name`` (None: the model's class name); with ``keys``, it also shows the first
    ``state_dict()`` key of the wrapper and of the model."""
    lines = []
    with _compile_group():
        for way, wrap in ways.items():
            model = make_model()
            n, wrapped = count_graphs(model, wrap, torch.randn(16, 2))
            line = f"{name or type(model).__name__:>24}, {way:>27}: {n} graph(s)"
            if keys:
                line += (f"; first keys: the wrapper's {list(wrapped.state_dict())[0]!r}, "
                         f"model's {list(model.state_dict())[0]!r}")
            lines.append(line)
    return lines


class Block(nn.Module):
    """A block class of your own: ``Linear(2, 2)``, then tanh."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def compile_ways() -> dict[str, Callable]:
    """The three orders of compile and DDP: ``{name: wrap(model, backend)}``."""

    def compile_in_place(model, backend):
        model.compile(backend=backend)  # compiles model itself, and returns None
        return DDP(model)

    return {"model.compile(); DDP(model)": compile_in_place,
            "DDP(torch.compile(model))": lambda model, backend: DDP(torch.compile(model, backend=backend)),
            "torch.compile(DDP(model))": lambda model, backend: torch.compile(DDP(model), backend=backend)}


def compile_order_models() -> dict[str, Callable[[], nn.Module]]:
    """The five models of the order-of-compile table: two classes of the lessons', torch.nn's own
    classes, and an ``nn.Sequential`` of ``Block``s."""
    from ddp_lib.workers.compiled import DeepNet

    return {"LoopNet": LoopNet, "DeepNet": DeepNet, "nn.Linear": lambda: nn.Linear(2, 2),
            "Sequential(Linear, ...)": lambda: nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)),
            "Sequential(Block, Block)": lambda: nn.Sequential(Block(), Block())}


def compile_order_table(counts: dict[str, dict[str, int]]) -> list[str]:
    """``compile_order_counts``'s result as a table: a header of the ways, then one row per model."""
    ways = next(iter(counts.values()))
    return ([f"{'graphs compiled':>24}" + "".join(f"{way:>30}" for way in ways)]
            + [f"{name:>24}" + "".join(f"{n:>30}" for n in row.values()) for name, row in counts.items()])


def compile_order_counts(models: dict[str, Callable[[], nn.Module]],
                         ways: dict[str, Callable]) -> dict[str, dict[str, int]]:
    """The graphs each way compiles, for each model: ``{model name: {way: graphs}}``, counted as
    ``compile_order_lines`` counts them. Dynamo's warnings are left to show."""
    with _compile_group(quiet=False):
        return {name: {way: count_graphs(make_model(), wrap, torch.randn(16, 2))[0] for way, wrap in ways.items()}
                for name, make_model in models.items()}


def compile_order_logged(models: dict[str, Callable[[], nn.Module]],
                         ways: dict[str, Callable]) -> tuple[dict[str, dict[str, int]], list[str], int]:
    """``compile_order_counts``, with what it let through: the lines dynamo logged at WARNING or above
    (``"LEVEL message"``), kept instead of shown, and the number of Python warnings raised."""
    dynamo_log, logged = logging.getLogger("torch._dynamo"), []
    catcher = logging.Handler(logging.WARNING)
    catcher.emit = logged.append  # keep what dynamo logs, to return it
    shown, dynamo_log.handlers = dynamo_log.handlers, [catcher]
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            counts = compile_order_counts(models, ways)
    finally:
        dynamo_log.handlers = shown
    return counts, [f"{r.levelname} {r.getMessage()}" for r in logged], len(warned)


def compile_order_pieces(make_model: Callable[[], nn.Module], ways: dict[str, Callable], steps: int = 2) -> list[str]:
    """Like ``compile_order_lines``, for a model with several of DDP's buckets: for each way, the bytes of
    parameters in each graph (piece) dynamo hands the backend, output side first, against the bytes of each
    all-reduce DDP started in the last of ``steps`` steps (from the second step on, DDP's rebuilt buckets).
    Each line ends with "split at buckets: True" when the pieces are DDP's buckets."""
    lines = []
    with _compile_group():
        for way, wrap in ways.items():
            model = make_model()
            pieces, sent = pieces_and_buckets(model, wrap, steps)
            lines.append(f"{type(model).__name__:>24}, {way:>27}: pieces {pieces} (bytes, output side first); "
                         f"DDP all-reduced {sent}; split at buckets: {pieces == sent}")
    return lines


def pieces_and_buckets(model: nn.Module, wrap: Callable, steps: int = 2) -> tuple[list[int], list[int]]:
    """``wrap(model, backend)`` (a DDP model, compiled in some order), stepped ``steps`` times on 16
    two-feature samples inside a process group. Returns the parameter bytes of each graph the backend got,
    output side first, and of each all-reduce DDP started in the last step."""
    torch.compiler.reset()
    pieces: list[int] = []
    sent: list[int] = []

    def recording_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable:
        pieces.append(sum(t.numel() * t.element_size() for t in example_inputs if isinstance(t, nn.Parameter)))
        return gm.forward  # run the piece as traced

    def recording_allreduce(_state: None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        sent.append(bucket.buffer().numel() * bucket.buffer().element_size())
        return default_hooks.allreduce_hook(None, bucket)

    wrapped = wrap(model, recording_backend)
    ddp_model = wrapped if isinstance(wrapped, DDP) else wrapped._orig_mod  # torch.compile(DDP(model))
    ddp_model.register_comm_hook(None, recording_allreduce)
    for _ in range(steps):
        sent.clear()
        wrapped(torch.randn(16, 2)).sum().backward()
    return pieces[::-1], sent  # dynamo compiles from the input side; backward all-reduces from the output side


def overflow_step_lines(overflow: list[dict]) -> list[str]:
    """One line per step of ``scaler_overflow``'s result on 2 ranks (in rank order): rank 0's scale
    and whether its gradients were finite, whether each rank stepped, and whether both ranks held the
    same gradients."""
    return [f"step {step}: scale {r0['scale']:>6g}, gradients finite {r0['finite']!s:5} | "
            f"stepped: rank 0 {r0['stepped']!s:5} rank 1 {r1['stepped']!s:5} | same gradients on both ranks: "
            f"{r0['grads'] == r1['grads']}"
            for step, (r0, r1) in enumerate(zip(overflow[0]["steps"], overflow[1]["steps"]))]
