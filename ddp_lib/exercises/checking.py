"""What every exercise checker shares: the report, runs on ranks, why a rank failed, collectives counted."""

import contextlib
import importlib
import inspect
import numbers
import pkgutil
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from unittest import mock

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError, own_line, readable, stopped_at
from ddp_lib.launch._checks import check_worker

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "gather_object", "broadcast",
               "broadcast_object_list", "all_to_all")
COLLECTIVE_HINT = "does every rank call the same collectives, in the same order?"
MISSING_WAIT = "{}(..., async_op=True) returns before the data has arrived: call .wait() on the Work it returns"
# (pattern in "Type: message", what to do), for failures whose own message does not say.
SHARED_HINTS = ((r"accelerator|CUDA|cuda", "this machine has no GPU: put tensors on the `device` the lesson provides "
                 "(with process_group(rank, world_size) as device), not on .to(rank)"),
                (r"^IndexError", "is a list's length or a number of ranks written in the code? use world_size "
                 "([None] * world_size)"),
                (r"EADDRINUSE", "another process holds that port (a job still running, or one you interrupted), "
                 "not your code: stop it, or wait, and run the check again (lesson 00, section "
                 "'\"Address already in use\" on a re-run')"))
# gloo's C++ says where it was built and what it checked: "[enforce fail at /__w/.../pair.cc:456] ".
_GLOO_WHERE = re.compile(r"^.*?what\(\):\s*|\[enforce fail at [^\]]*\]\s*")


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

    def __str__(self) -> str:
        verdict = "All checks passed." if self.passed else "Not yet: fix what the FAIL lines say."
        return "\n".join([*self.lines, verdict])


def worker_name(fn: Callable | str) -> str:
    """``"module:function"`` for the learner's worker (a function, or that string already)."""
    return check_worker(pkgutil.resolve_name(fn) if isinstance(fn, str) else fn)


def load_worker(target: str) -> Callable:
    """In a rank: the learner's function named by ``target``, read fresh from its file."""
    importlib.invalidate_caches()
    return pkgutil.resolve_name(target)


def as_number(value: object) -> float | str:
    """A float for a number however written (int, float, numpy scalar, one-element tensor), else its kind."""
    value = value.item() if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1 else value
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return float(value) if number else f"a {type(value).__name__}"


def run_on_ranks(fn: Callable, world_size: int, report: Report, args: tuple = (), timeout: float = 60.0,
                 hints: tuple[tuple[str, str], ...] = ()) -> list | None:
    """``fn(rank, world_size, *args)``'s results in rank order, or None and a FAIL line that says why."""
    from ddp_lib.launch import launch  # imports torch, which lesson 06's checker never needs here

    try:
        return launch(fn, world_size, args, backend="gloo", timeout=timeout, show_output=False).results
    except LaunchInputError as exc:
        report.fail(f"the worker cannot be launched: {exc}")
    except LaunchTimeout as exc:
        report.fail(f"world_size {world_size}: rank(s) {', '.join(map(str, exc.running))} still running "
                    f"after {timeout:g} s{hang_report(exc)}")
    except WorkerError as exc:
        report.fail(f"world_size {world_size}: {failure(exc, hints)}")
    return None


def run_counted(rank: int, world_size: int, target: str, collectives: tuple[str, ...], inputs: list) -> dict:
    """In a rank: the learner's ``target(rank, world_size, inputs[rank])``, its ``collectives`` and their names."""
    with counting_collectives(*collectives) as calls:
        result = load_worker(target)(rank, world_size, inputs[rank])
    return {"result": result, "calls": calls, "called": list(dict.fromkeys(call["name"] for call in calls))}


def check_on_ranks(run: Callable, world_sizes, judge: Callable, args: tuple | Callable = (),
                   passed: str | Callable = "", stop: bool = False, where: Callable | None = None, **options) -> Report:
    """Run ``run(rank, world_size, *args)`` (or ``*args(world_size)``) on each of ``world_sizes``; ``judge(runs)``
    gives the problems (a sentence, a list or None), said after ``where(runs)``, else ``passed`` (or its call)."""
    report = Report()
    for world_size in world_sizes:
        runs = run_on_ranks(run, world_size, report, args(world_size) if callable(args) else args, **options)
        if runs is not None:
            said, problems = where(runs) if where else f"world_size {world_size}", judge(runs)
            for problem in [problems] if isinstance(problems, str) else problems or []:
                report.fail(f"{said}: {problem}")
            if not problems:
                report.ok(f"{said}: {passed(runs) if callable(passed) else passed}")
        if stop and not report.passed:
            break
    return report


def failure(exc: WorkerError, hints: tuple[tuple[str, str], ...] = ()) -> str:
    """One sentence for a failed rank: a broken collective, a kill (with its stderr's end) or an exception."""
    if exc.echo:  # raised inside a collective: its words depend on timing, say what happened
        return (f"rank {exc.rank}'s collective broke because another rank left it or never joined "
                f"({exc.exc_type}); {COLLECTIVE_HINT}")
    if not exc.exc_type:  # it died: "was killed by SIGABRT before returning a result"
        lines = [line for line in exc.outputs.get(exc.rank, ("", ""))[1].splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if "what():" in line), lines[-1] if lines else "")
        said = readable(_GLOO_WHERE.sub("", last), 200)
        text = f"rank {exc.rank} {exc.message}" + (f"; its stderr ends: {said}" if said else "")
    else:
        said, hints = f"{exc.exc_type}: {exc.message}", (*hints, *SHARED_HINTS)
        text = f"rank {exc.rank} raised {exc.exc_type}: {readable(exc.message, 160)}"
        # A stub's NotImplementedError already says what to write: its line adds nothing.
        if (line := own_line(exc.worker_traceback)) and exc.exc_type != "NotImplementedError":
            text += f" (at {line})"
    hint = next((fix for pattern, fix in hints if re.search(pattern, said)), "")
    return f"{text}; {hint}" if hint else text


def hang_report(exc: LaunchTimeout) -> str:
    """Where the ranks still running were when stopped (from their stacks), and what that suggests."""
    places = {rank: stopped_at(exc.stack_frames[rank]) for rank in exc.running if rank in exc.stack_frames}
    said = [f"rank {rank} was in {p.call}, called at {p.line}" if p.call and p.line else
            f"rank {rank} was at {p.line}" if p.line else
            f"rank {rank} was in {p.call}" + (", outside its worker" if p.outside_worker else "")
            for rank, p in places.items() if p.call or p.line]
    if not said:  # a rank busy in C code that holds Python's lock cannot write its stack
        return (". No rank said where it was: does the work take longer than the deadline? "
                f"{COLLECTIVE_HINT[0].upper()}{COLLECTIVE_HINT[1:]}")
    where = f". {'; '.join(said)}"
    if not any(place.communicating for place in places.values()):
        return f"{where}. No rank was in torch.distributed: does the work take longer than the deadline?"
    return f"{where}. A rank waits in a collective that another rank never called: {COLLECTIVE_HINT}"


class _WatchedWork:
    """The Work an ``async_op=True`` collective returns, noting whether anyone waited on it."""
    def __init__(self, work, call: dict) -> None:
        self._work, self._call = work, call

    def __getattr__(self, name: str):
        self._call["waited"] |= name in ("wait", "get_future")
        return getattr(self._work, name)


@contextlib.contextmanager
def counting_collectives(*names: str) -> Iterator[list[dict]]:
    """In a rank: each call of ``names`` (default COLLECTIVES) in the block; ProcessGroup methods are not seen."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    calls: list[dict] = []
    inside = [False]  # a collective that torch runs inside a counted one is not the learner's call

    def counted(name: str, original: Callable) -> Callable:
        signature = inspect.signature(original)

        def call(*args, **kwargs):
            if inside[0]:
                return original(*args, **kwargs)
            bound = signature.bind(*args, **kwargs).arguments
            tensor = bound.get("tensor")
            record = {"name": name, "op": str(bound.get("op", "")).split(".")[-1] or None,
                      "async_op": bool(bound.get("async_op")), "waited": False,
                      "numel": getattr(tensor, "numel", lambda: None)(), "dtype": str(getattr(tensor, "dtype", ""))}
            calls.append(record)
            inside[0], start = True, time.perf_counter()
            work = original(*args, **kwargs)  # a call that raises ends the worker: nothing more to count
            inside[0], record["seconds"] = False, time.perf_counter() - start
            if name == "batch_isend_irecv" and isinstance(work, list):  # one request per P2POp, each to wait on
                record["requests"] = [{"waited": False} for _ in work]
                return [_WatchedWork(request, seen) for request, seen in zip(work, record["requests"])]
            return _WatchedWork(work, record) if record["async_op"] and work is not None else work
        return call

    with contextlib.ExitStack() as patches:  # each function put back however the block ends
        for name in names or COLLECTIVES:
            wrapper = counted(name, getattr(distributed_c10d, name))
            for module in (distributed_c10d, dist):
                patches.enter_context(mock.patch.object(module, name, wrapper))
        yield calls

