"""A worker's own parameters, read from its signature, annotations and docstring.

``fn(rank, world_size, epochs: int = 8, resume: bool = False, norm: Literal["none", "batch"] = "none")``
has three parameters after ``rank`` and ``world_size``; :func:`worker_params` describes each one
(type, default, choices, whether ``None`` is allowed, the help line from the docstring's
``Args:`` block). The command line builds its options from them, and :data:`RULES` declares,
once, the values a parameter of a given name must have in ddp_lib's own workers (``epochs`` 1 or
more, ``lr`` finite and above 0, ...), checked before any process starts by
``ddp_lib.launch._checks.check_launch``. A worker of your own is checked against its ``Literal``
choices only: its ``lr`` or ``epochs`` are its own to check.
"""

from __future__ import annotations

import inspect
import math
import numbers
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass

REQUIRED = inspect.Parameter.empty
SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class Param:
    """One parameter of a worker after ``rank`` and ``world_size``."""

    name: str
    type: type | None  # bool, int, float or str; None when the annotation is none of them
    default: object  # REQUIRED when the signature gives none
    optional: bool = False  # the annotation admits None (``X | None``)
    choices: tuple | None = None  # from ``Literal[...]``
    help: str = ""
    rule: tuple[Callable[[object], bool], str] | None = None  # (test, what is accepted), from RULES

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def worker_params(fn: Callable, leading: int = 2) -> list[Param]:
    """The parameters of ``fn`` after its first ``leading`` ones (rank and world_size; rank only
    for a torch.multiprocessing worker, fn(i, ...)), in order; ``*args`` and ``**kwargs`` are left out."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not evaluate: fall back to the defaults' types
        hints = {}
    docs = docstring_args(fn)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    found = []
    for p in list(sig.parameters.values())[leading:]:
        if p.kind not in kinds:
            continue
        scalar, optional, choices = _describe(hints.get(p.name, inspect.Parameter.empty), p.default)
        rule = RULES.get(p.name) if is_ddp_lib_worker(fn) else None
        found.append(Param(p.name, scalar, p.default, optional, choices, docs.get(p.name, ""), rule))
    return found


def is_ddp_lib_worker(fn: Callable) -> bool:
    """Whether ``fn`` is one of ddp_lib's own workers, whose parameter names :data:`RULES` speaks for."""
    return (getattr(fn, "__module__", None) or "").startswith("ddp_lib.")


def _describe(annotation: object, default: object) -> tuple[type | None, bool, tuple | None]:
    """(scalar type, admits None, Literal choices) of one annotation."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        annotation = members[0] if len(members) == 1 else object
        origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        kinds = {type(c) for c in choices}
        return (kinds.pop() if len(kinds) == 1 and kinds <= set(SCALARS) else None), optional, choices
    if annotation in SCALARS:
        return annotation, optional, None
    if annotation is inspect.Parameter.empty and type(default) in SCALARS:
        return type(default), optional, None
    if annotation is inspect.Parameter.empty and default is None:
        return str, True, None
    return None, optional, None


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ENTRY = re.compile(r"^(\s*)(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def docstring_args(fn: Callable) -> dict[str, str]:
    """``{name: description}`` from the Google-style ``Args:`` block of ``fn``'s docstring
    (a description continued on more-indented lines is joined into one line)."""
    lines = (inspect.getdoc(fn) or "").splitlines()
    start = next((i for i, line in enumerate(lines) if _SECTION.match(line)), None)
    if start is None:
        return {}
    found: dict[str, str] = {}
    indent, name = None, None
    for line in lines[start + 1:]:
        if not line.strip():
            if found:  # a blank line after the entries ends the block
                break
            continue
        entry = _ENTRY.match(line)
        width = len(line) - len(line.lstrip())
        if indent is None and entry:
            indent = width
        if indent is None or width < indent:
            break
        if width == indent and entry:
            name = entry.group(2).lstrip("*")
            found[name] = entry.group(3).strip()
        elif name is not None:
            found[name] = f"{found[name]} {line.strip()}".strip()
    return found


def summary(fn: Callable) -> str:
    """The first sentence of ``fn``'s docstring, on one line."""
    first = (inspect.getdoc(fn) or "").split("\n\n")[0]
    text = " ".join(first.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text


# What a parameter of a given name must be in ddp_lib's own workers, declared once: (test, what is
# accepted). A user's worker that happens to name a parameter ``epochs`` or ``lr`` is not bound by it.
def _whole(least: int, most: int | None = None) -> tuple[Callable[[object], bool], str]:
    def test(value: object) -> bool:
        return (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= least
                and (most is None or value <= most))
    return test, f"a whole number, {least} or more" + (f", at most {most}" if most is not None else "")


def _positive_finite(value: object) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


_POSITIVE = (_positive_finite, "a finite number above 0")

# torch.compile backends a worker's ``compile_backend`` may name: those that run with torch alone,
# on a CPU as on a GPU. torch._dynamo.list_backends() is no list to check against: by default it
# leaves out aot_eager and eager (tagged "debug") and holds cudagraphs (CUDA only), openxla and tvm
# (packages of their own); with exclude_tags=() it adds backends that fail on purpose, for torch's tests.
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")

# A count that sizes a tensor or a DataLoader's batch: torch takes at most a C int64 (larger is
# "Overflow when unpacking long" in every rank), and a batch beyond 2**31 samples fits no memory here.
_MOST_PER_BATCH = 2**31 - 1
# Seeds reach torch.manual_seed as seed + rank, seed + epoch, seed * 1_000_003 + step (beyond_ddp):
# numpy's range keeps every one of them within torch's 64 bits.
_MOST_SEED = 2**32 - 1

RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "epochs": _whole(1),
    "steps": _whole(1),
    "batch_size": _whole(1, _MOST_PER_BATCH),
    "per_rank_batch": _whole(1, _MOST_PER_BATCH),
    "seed": _whole(0, _MOST_SEED),
    "keep_last": _whole(1),
    "grad_accum_steps": _whole(1),
    "numel": _whole(0),
    "nproc_per_node": _whole(1),
    "timing_steps": _whole(1),
    "warmup": _whole(0),
    "lines": _whole(0),
    "fail_at_epoch": _whole(0),
    "lr": _POSITIVE,
    "bucket_cap_mb": _POSITIVE,
    "compile_backend": (COMPILE_BACKENDS.__contains__, f"one of {', '.join(map(repr, COMPILE_BACKENDS))}"),
}


# A parameter of ddp_lib's workers that, when true, needs another to be given (not None, not ""):
# train(resume=True) reads its checkpoints from checkpoint_dir.
NEEDS: dict[str, str] = {"resume": "checkpoint_dir"}


def value_problem(param: Param, value: object) -> str | None:
    """What is wrong with ``value`` for ``param`` ("must be ..."), or None when it is accepted.
    Checked: the Literal choices and the parameter's rule (:data:`RULES`, for ddp_lib's own workers);
    None passes where the annotation admits it."""
    if value is None and (param.optional or param.default is None):
        return None
    if param.choices is not None and value not in param.choices:
        return f"must be one of {', '.join(map(repr, param.choices))}, got {value!r}"
    if param.rule is not None and not param.rule[0](value):
        return f"must be {param.rule[1]}, got {value!r}"
    return None
