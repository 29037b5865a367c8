"""What every exercise checker shares: one report shape, one way to run the learner's worker on
every rank, and one way to name that worker.

A checker takes the learner's worker function itself (imported from the file the lesson wrote),
runs it on every rank with :func:`run_on_ranks`, and returns a :class:`Report`: one ``PASS`` or
``FAIL`` line per thing checked, and ``passed``. ``print(report)`` shows it.

The limits every checker shares: the learner's code runs in the checker's processes (the ranks, and
the notebook's, which imports the learner's module), so code that patches a checker, this module
or torch is not guarded against. Nor can a checker see what the learner's code does with a
collective's result: a worker that runs the right collective, ignores what it returns and takes the
data from elsewhere (files, the store) passes as one that uses it. Where a checker cannot tell
more apart, its docstring says so.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import numbers
import pickle
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError, is_peer_failure, readable, stopped_at
from ddp_lib.launch_checks import check_worker

COLLECTIVE_HINT = "does every rank call the same collectives, in the same order?"
# c10d operators that move no data between ranks (as counted by counting_collectives).
NOT_CARRYING_DATA = frozenset({"barrier", "monitored_barrier_"})
# Backends that carry data between processes. torch's "fake" backend (for tests) accepts collectives
# of any world size and sends nothing to anyone.
REAL_BACKENDS = ("gloo", "nccl", "xccl", "ucc", "mpi")


@dataclass
class Report:
    """A checker's verdict: one line per thing checked (``PASS ...`` or ``FAIL ...``) and ``passed``."""

    lines: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.lines) and not any(line.startswith("FAIL") for line in self.lines)

    def ok(self, text: str) -> None:
        self.lines.append(f"PASS {text}")

    def fail(self, text: str) -> None:
        self.lines.append(f"FAIL {text}")

    def fail_each(self, where: str, problems: list[str]) -> bool:
        """A FAIL line ``where: problem`` for each of ``problems``; whether there was any."""
        for problem in problems:
            self.fail(f"{where}: {problem}")
        return bool(problems)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "All checks passed." if self.passed else "Not yet: fix what the FAIL lines say."
        return "\n".join([*self.lines, verdict])


def worker_name(fn: Callable | str) -> str:
    """``"module:function"`` for the learner's worker (a function, or that string already)."""
    if isinstance(fn, str):
        fn = pkgutil.resolve_name(fn)  # fails here, in the caller, if it does not exist
    return check_worker(fn)


def load_worker(target: str) -> Callable:
    """In a rank: the learner's function named by ``target``, read fresh from its file."""
    importlib.invalidate_caches()
    return pkgutil.resolve_name(target)


def run_on_ranks(fn: Callable, world_size: int, report: Report, args: tuple = (), kwargs: dict | None = None,
                 timeout: float = 60.0, **options) -> list | None:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on every rank (gloo) and return the results in
    rank order; when the job fails, add one FAIL line to ``report`` that says why and return None."""
    run = launch_on_ranks(fn, world_size, report, args, kwargs, timeout, **options)
    return None if run is None else run.results


def launch_on_ranks(fn: Callable, world_size: int, report: Report, args: tuple = (), kwargs: dict | None = None,
                    timeout: float = 60.0, **options):
    """:func:`run_on_ranks`, returning the launcher's whole result (``.results``, ``.stdout``, ...)."""
    # Imported here, not at the top: it imports torch, which a checker that starts its ranks another
    # way (lesson 06's, under torchrun) never needs in the notebook's own process.
    from ddp_lib.launch import launch

    where = f"world_size {world_size}"
    try:
        return launch(fn, world_size, args, kwargs, backend="gloo", timeout=timeout, show_output=False, **options)
    except LaunchInputError as exc:
        report.fail(f"the worker cannot be launched: {exc}")
    except LaunchTimeout as exc:
        report.fail(f"{where}: rank(s) {', '.join(map(str, exc.running))} still running after {timeout:g} s"
                    f"{_where_stopped(exc)}")
    except WorkerError as exc:
        if is_peer_failure(exc.exc_type, exc.message):
            # The exact words depend on timing (closed, reset, timed out): say what happened.
            report.fail(f"{where}: rank {exc.rank}'s collective broke because another rank left it or never "
                        f"joined ({exc.exc_type}); {COLLECTIVE_HINT}")
        else:
            what = f"raised {exc.exc_type}: " if exc.exc_type else ""  # none: it died ("was killed by SIGABRT ...")
            report.fail(f"{where}: rank {exc.rank} {what}{readable(exc.message, 160)}")
    return None


def _where_stopped(exc: LaunchTimeout) -> str:
    """Where the ranks still running were when stopped (from their stacks), and what that suggests."""
    places = {rank: stopped_at(exc.stacks[rank]) for rank in exc.running if rank in exc.stacks}
    said = []
    for rank, place in places.items():
        if place.call and place.line:
            said.append(f"rank {rank} was in {place.call}, called at {place.line}")
        elif place.line:
            said.append(f"rank {rank} was at {place.line}")
        elif place.call:
            said.append(f"rank {rank} was in {place.call}" + (", outside its worker" if place.outside_worker else ""))
    where = f". {'; '.join(said)}" if said else ""
    if said and not any(place.communicating for place in places.values()):
        return f"{where}. No rank was in torch.distributed: does the work take longer than the deadline?"
    return f"{where}. A rank waits in a collective that another rank never called: {COLLECTIVE_HINT}"


@contextlib.contextmanager
def counting_collectives() -> Iterator[collections.Counter]:
    """In a rank: count the collectives that ran while the block ran, by c10d's operator name
    (``"allreduce_"``, ``"broadcast_"``, ``"allgather_"``, ``"barrier"``, ...), however they were
    called: ``dist.all_reduce``, ``distributed_c10d.all_reduce``, a name imported with ``from
    torch.distributed import ...``, a ``ProcessGroup`` method, or DDP's own reducer. The counter is
    filled when the block ends. It cannot be bypassed by another route to the same collective,
    because it reads torch's profiler, which records every c10d operator."""
    from torch.profiler import ProfilerActivity, profile

    counts: collections.Counter = collections.Counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield counts
    found = collections.Counter()
    for event in prof.key_averages():
        if event.key.startswith("c10d::"):
            found[event.key.removeprefix("c10d::")] += event.count
    # Only what the profiler recorded counts: whatever the block did to this counter (entries,
    # methods set on it, its class) is undone, through dict's own methods.
    _reset(counts, collections.Counter)
    dict.update(counts, found)


def _reset(record, cls: type) -> None:
    """Empty ``record`` and give it back its class and no attributes of its own (a block that could
    reach it may have set a method on it, or its class)."""
    record.__class__ = cls
    record.__dict__.clear()
    dict.clear(record)


class CollectiveInputs:
    """What every collective that carries data was given in a :func:`watching_collectives` block
    (the ``inputs`` it yields), so that a checker can ask whether a rank's private value really
    travelled through the process group, and not through files or the store beside a collective
    that carries nothing of it."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit  # elements kept per tensor
        self.raw: list[bytes] = []
        self.values: list[list] = []
        # How many ranks the group of the collective had, beside each entry of raw and values.
        self.raw_group_sizes: list[int | None] = []
        self.value_group_sizes: list[int | None] = []
        self.by_op: list[tuple[str, list]] = []  # (operator, values) for each tensor given to one

    def add(self, op: str, sent: tuple[tuple[tuple, bool], ...], group_size: int | None) -> None:
        """Add what one call of ``op`` over a group of ``group_size`` ranks sent: ``(values, is_bytes)``
        for each tensor, as :func:`watching_collectives` keeps it."""
        for values, is_bytes in sent:
            self.values.append(list(values))
            self.value_group_sizes.append(group_size)
            self.by_op.append((op, self.values[-1]))
            if is_bytes:
                self.raw.append(bytes(values))
                self.raw_group_sizes.append(group_size)

    def over(self, group_size: int) -> CollectiveInputs:
        """Only what went into collectives over a group of ``group_size`` ranks (a collective in a
        group of one rank alone sends nothing to anyone)."""
        narrowed = CollectiveInputs(self.limit)
        narrowed.raw = [r for r, n in zip(self.raw, self.raw_group_sizes) if n == group_size]
        narrowed.values = [v for v, n in zip(self.values, self.value_group_sizes) if n == group_size]
        narrowed.by_op = [(op, v) for (op, v), n in zip(self.by_op, self.value_group_sizes) if n == group_size]
        return narrowed

    def carried(self, items: list, group_size: int | None = None) -> bool:
        """Whether ``items`` (numbers, or one string) went into a collective: as values of one tensor,
        side by side or one every ``group_size`` values (a rank's items at their places in a
        zero-padded tensor of everyone's), or inside the bytes of a pickled object
        (``all_gather_object`` and its kind; numbers pickled in a list, as floats, in a tensor, or
        written as text). With ``group_size``, only collectives over a group of that many ranks count
        (a group of one rank alone carries nothing anywhere). A stride, not any order: values with
        others anywhere between them would be found in a long enough tensor of every candidate."""
        sent = self.over(group_size) if group_size is not None else self
        strides = (1, group_size) if group_size else (1,)
        if isinstance(items, str):
            pattern, wanted = items.encode(), [ord(c) for c in items]
        else:
            # pickle writes the small ints of a list or tuple one after another, each as one
            # opcode (BININT1, BININT2, BININT) and its little-endian bytes
            pattern, wanted = b"".join(_pickled_int(int(v)) for v in items), list(items)
        if any(pattern in raw for raw in sent.raw):
            return True
        if not isinstance(items, str) and any(_at_a_stride(wanted, numbers_in(unpickled(raw)), strides)
                                              for raw in sent.raw):
            return True
        return any(_at_a_stride(wanted, values, strides) for values in sent.values)


@dataclass
class Collectives:
    """What :func:`watching_collectives` saw: ``counts``, the collectives that ran by c10d's
    operator name (as :func:`counting_collectives` counts them), and ``inputs``, what those that
    carry data were given (a :class:`CollectiveInputs`; only what went to a group on one of
    REAL_BACKENDS counts as sent to its ranks), and ``backends``. All are filled when the block ends."""

    counts: collections.Counter = field(default_factory=collections.Counter)
    inputs: CollectiveInputs = field(default_factory=CollectiveInputs)
    backends: tuple[str, ...] = ()  # the backends of the groups the collectives ran in


@contextlib.contextmanager
def watching_collectives(limit: int = 1 << 16) -> Iterator[Collectives]:
    """In a rank: count the collectives the block runs and keep what each was given, however it was
    called (``dist.all_reduce``, ``distributed_c10d.all_reduce``, a name imported from
    ``torch.distributed``, a ``ProcessGroup`` method, a functional collective, DDP's reducer).

    Two witnesses run together. A dispatch mode sees every c10d operator's arguments and keeps, for
    each call, the operator, the shapes and dtypes of its tensor arguments, its group's size and the
    data this rank sends (at most ``limit`` elements per tensor), all as tuples, fixed when the call
    is made: nothing in a record can be extended or rewritten in place. Torch's profiler, with the
    shapes of each operator's inputs, records every c10d operator that ran; it holds no values. When
    the block ends, a record is kept only if the profiler saw the same operator with the same input
    shapes and dtypes, no fewer times than there are records of that kind, and only if the tensors
    it says were sent fit those shapes: no more of them than the call had, each as long as one of
    its tensors (up to ``limit``), a byte string only for a uint8 tensor. The block's code runs in
    this process and can reach the mode's list of records (through ``gc``); a record it adds there
    has no operator behind it, so it is dropped, and the records of that kind with it; a record
    whose sent tensors it replaces with more or longer ones no longer fits its call, and is dropped.

    The limit: code in the block can still run a real collective of exactly the same operator and
    shapes as the data it wants to claim (an all-reduce of zeros) and then swap that call's whole
    record in the list for one that says it carried that data, or change torch itself or this
    module's own functions (the checker runs in the same process); the profiler checks that the
    operator ran with those shapes, not what it carried."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils._python_dispatch import TorchDispatchMode

    # (operator, input shapes, group size, what this rank sent), one per operator called. Each
    # record is a tuple of tuples, made when the operator is called.
    calls: list[tuple] = []
    backends: set[str] = set()

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            # c10d's operators, and the functional collectives' (_functional_collectives.all_reduce)
            if name.startswith(("c10d::", "_c10d_functional::")) and "barrier" not in name:
                group = group_of(args, func._schema)
                backend = _backend_of(group)
                if backend is not None:
                    backends.add(backend)
                # A group on the "fake" backend has any size and sends nothing: no group size counts.
                size = group.size() if group is not None and backend in REAL_BACKENDS else None
                # Copied now: the operator may write into its inputs.
                sent = _frozen(_sent_by_this_rank(func._schema, args, group), limit)
                calls.append((name, _shapes(func._schema, args, kwargs or {}), size, sent))
            return func(*args, **(kwargs or {}))

    seen = Collectives()
    # One profiler only: a second one started inside it would leave the outer one empty.
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, _Mode():
        yield seen
    ran = _operators_run(prof.profiler.kineto_results.experimental_event_tree())
    counts = collections.Counter(name.removeprefix("c10d::") for name, _, _ in ran if name.startswith("c10d::"))
    # The operators the block called itself: one that ran inside another is no call of its own.
    ran_by_kind = collections.Counter((name, shapes) for name, shapes, inside in ran if not inside)
    called_by_kind = collections.Counter((name, shapes) for name, shapes, _, _ in calls)
    inputs = CollectiveInputs(limit)
    for name, shapes, size, sent in calls:
        if called_by_kind[(name, shapes)] <= ran_by_kind[(name, shapes)] and _fits(sent, shapes, limit):
            inputs.add(name.split("::")[1], sent, size)
    # Whatever the block did to the object it was given (attributes, methods, its class) is undone.
    seen.__class__ = Collectives
    seen.__dict__.clear()
    seen.__dict__.update(counts=counts, inputs=inputs, backends=tuple(sorted(backends)))


def _backend_of(group) -> str | None:
    """The backend of a process group ("gloo", "nccl", "fake", ...), None when there is no group."""
    import torch.distributed as dist

    if group is None:
        return None
    try:
        return str(dist.get_backend(group))
    except (RuntimeError, ValueError):
        return "unknown"


def _tensor_shape(value) -> tuple | None:
    import torch

    if isinstance(value, torch.Tensor):
        return tuple(value.shape), str(value.dtype)
    if hasattr(value, "sizes") and hasattr(value, "dtype"):  # the profiler's record of a tensor
        return tuple(value.sizes), str(value.dtype)
    return None


def _flat_shapes(values) -> tuple:
    """The shapes and dtypes of the tensors among ``values`` and in their lists (a list of lists, as an
    all-gather's outputs, is left out: the profiler records none of its shapes)."""
    shapes = []
    for value in values:
        items = value if isinstance(value, (list, tuple)) else [value]
        shapes.extend(shape for shape in map(_tensor_shape, items) if shape is not None)
    return tuple(shapes)


def _shapes(schema, args: tuple, kwargs: dict) -> tuple:
    """In the dispatch mode: the shapes of a c10d operator's tensor arguments, in the schema's order."""
    names = [a.name for a in schema.arguments]
    return _flat_shapes([*args, *(kwargs[name] for name in names[len(args):] if name in kwargs)])


def _operators_run(roots) -> list[tuple[str, tuple, bool]]:
    """Every c10d operator (and functional collective) in the profiler's event tree, as (name, input
    shapes, whether it ran inside another one: a functional all-reduce runs c10d's), counted once:
    the same operator again right under the dispatch mode's own event is the mode handing the call
    on, not a second call."""
    from torch._C._profiler import RecordScope, _EventType

    found, stack = [], [(root, False) for root in roots]
    while stack:
        event, inside = stack.pop()
        kind, fields = event.typed
        # A record_function block of the same name is no operator; the mode's hand-on is no new call.
        is_collective = (kind == _EventType.TorchOp and fields.scope == RecordScope.FUNCTION
                         and event.name.startswith(("c10d::", "_c10d_functional::")))
        if is_collective and not (event.parent is not None and event.parent.name == "PythonDispatchMode"):
            found.append((event.name, _flat_shapes(fields.inputs), inside))
        stack.extend((child, inside or is_collective) for child in event.children)
    return found


def _frozen(value, limit: int) -> tuple[tuple[tuple, bool], ...]:
    """What a collective was given, kept as it is now: for each tensor in ``value`` (a tensor, or
    lists of them), its first ``limit`` elements as a tuple, and whether it is a uint8 tensor (whose
    values are bytes: a pickled object, as ``all_gather_object`` sends)."""
    import torch

    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1)[:limit].cpu()
        return ((tuple(flat.tolist()), flat.dtype == torch.uint8),)
    if isinstance(value, (list, tuple)):
        return tuple(entry for item in value for entry in _frozen(item, limit))
    return ()


def _fits(sent: tuple, shapes: tuple, limit: int) -> bool:
    """Whether what a record says was sent could have come from a call with these tensor ``shapes``:
    no more tensors than the call had, each as long as one of them (up to ``limit`` elements), and
    bytes only from a uint8 tensor. A record whose data was extended or replaced after the call
    fails this (the shapes are the profiler's, checked beside it)."""
    import math

    lengths = collections.Counter(min(math.prod(shape), limit) for shape, _ in shapes)
    byte_lengths = collections.Counter(min(math.prod(shape), limit) for shape, dtype in shapes
                                       if dtype == "torch.uint8")
    sent_lengths = collections.Counter(len(values) for values, _ in sent)
    sent_byte_lengths = collections.Counter(len(values) for values, is_bytes in sent if is_bytes)
    in_byte_range = all(isinstance(v, int) and 0 <= v < 256 for values, is_bytes in sent if is_bytes for v in values)
    return not sent_lengths - lengths and not sent_byte_lengths - byte_lengths and in_byte_range


def _sent_by_this_rank(schema, args: tuple, group) -> list:
    """The arguments of a c10d operator whose data this rank sends: its inputs, not the buffers it
    receives into (a tensor filled in advance and handed to an all-gather, a recv or a broadcast
    from another rank carries nothing to anyone)."""
    names = [a.name for a in schema.arguments][: len(args)]
    given = dict(zip(names, args))
    op = schema.name.split("::")[1]
    if op.startswith("recv") or not {"process_group", "group_name"} & set(names):
        return []  # a receive, or a helper that moves no data between ranks (wait_tensor, ...)
    root = given.get("root_rank", given.get("src"))
    if op in ("broadcast_", "scatter_", "broadcast") and root is not None and group.rank() != root:
        return []  # only the root's data leaves it
    inputs = [value for name, value in given.items() if name.startswith("input")]
    return inputs if inputs else [given.get("tensors", [])]


def group_of(args: tuple, schema=None):
    """In a dispatch mode: the process group given to a c10d operator (which receives it boxed, as a
    ScriptObject), or named by a functional collective's ``group_name``; None when there is none."""
    import torch
    import torch.distributed as dist

    for arg in args:
        if isinstance(arg, torch.ScriptObject) and arg._type().name().split(".")[-1] == "ProcessGroup":
            return dist.ProcessGroup.unbox(arg)
        if isinstance(arg, dist.ProcessGroup):
            return arg
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "group_name" in names[: len(args)]:
        return dist.distributed_c10d._resolve_process_group(args[names.index("group_name")])
    return None


def _pickled_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + value.to_bytes(2, "little")
    return b"J" + value.to_bytes(4, "little", signed=True)


def unpickled(raw: bytes) -> object:
    """The object pickled at the start of ``raw`` (all_gather_object pads it), else ``raw`` read as
    text (numbers sent as a string's bytes)."""
    try:
        return pickle.loads(raw)  # sent by code already running in this process: nothing new is trusted
    except Exception:
        return raw.decode("utf-8", "replace")


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def numbers_in(value: object, depth: int = 0) -> list:
    """The numbers in ``value`` in order: itself, or those in its tensors, arrays, lists, tuples,
    dicts and strings (``"3,14"`` holds 3 and 14)."""
    if depth > 20:
        return []
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        return [float(x) if any(c in x for c in ".eE") else int(x) for x in _NUMBER.findall(value)]
    if hasattr(value, "tolist") and hasattr(value, "shape"):  # a tensor or an array
        return numbers_in(value.tolist(), depth + 1)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in numbers_in(item, depth + 1)]
    return []


def _at_a_stride(wanted: list, values: list, strides: tuple[int, ...]) -> bool:
    """Whether ``wanted`` sits in ``values`` one every ``stride`` values, for one of ``strides``."""
    if not wanted:
        return True
    for start, value in enumerate(values):
        if value != wanted[0]:
            continue
        for stride in strides:
            end = start + stride * (len(wanted) - 1)
            if end < len(values) and all(values[start + i * stride] == w for i, w in enumerate(wanted)):
                return True
    return False
