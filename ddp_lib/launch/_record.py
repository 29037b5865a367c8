"""Each rank's result, output and error, written to one folder per rank and read back: the one
channel of every job, whether its ranks were started by ddp_lib's launcher (``run_ranks``,
``ddp_lib.mp.labelled_spawn``, ``ddp_lib.live``) or by torchrun, on one machine, on several hosts or under SLURM.

torchrun gives each local rank of each node a folder of its own,
``<log dir>/<run id>_<random>/attempt_<N>/<local rank>/`` (``DefaultLogsSpecs.reify``,
``torch/distributed/elastic/multiprocessing/api.py``), where N is that node's agent's
``TORCHELASTIC_RESTART_COUNT``: attempts are counted per node, and a round restarted because another
node joined keeps N (torchrun deletes that attempt's old folder first). ``--redirects``/``--tee``
put ``stdout.log`` and ``stderr.log`` there, and the rank's ``TORCHELASTIC_ERROR_FILE`` names
``error.json`` there, where ``@record`` writes an Exception that ends the rank. A rank run by
``ddp_lib`` writes where it stands in the job first, in ``rank.json``, and what it returns, in
``result.json`` (read back from its pickle, :func:`dump_result`: a tensor comes back a tensor).

A rank of ddp_lib's launcher writes the same files, with the same writers, in a folder the launcher
makes for it, ``<its launch's folder>/<rank>/`` (:class:`ddp_lib.launch._output.RankOutput`): its
output is ``stdout.log`` and ``stderr.log`` there, and its child process (:mod:`ddp_lib.launch._child`)
names the folder with :func:`use_rank_dir`. The launcher reads each folder with :func:`read_rank`,
the reader :func:`read_ranks` calls for each of torchrun's; a rank's pipe to the launcher carries
no record, it only wakes the launcher (:mod:`ddp_lib.launch._job`). Stacks are asked for and answered in the same folder
(:func:`stack_files`).

Imports no torch: a rank that only reads its environment starts and fails in a fraction of a second.
"""

from __future__ import annotations

import base64
import json
import math
import os
import pickle
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ddp_lib.errors import Failure, WorkerError, failure_of, with_silent_ranks
from ddp_lib.launch._output import STDERR_FILE, STDOUT_FILE, output_text

# {"rank": r, "result": what it returned as JSON shows it (for a person), "pickle": the same value
# pickled (dump_result, base64), which is what the reader gives back: a tensor comes back a tensor.
RESULT_FILE = "result.json"
RANK_FILE = "rank.json"
ERROR_FILE = "error.json"
# Where a supervisor asks a rank for its stacks, and where the rank writes them (ddp_lib.launch._stacks).
STACKS_REQUEST, STACKS_FILE = "stacks.request", "stacks.json"
# Where a torchrun run by ddp_lib writes its own exception (its main is wrapped in @record), e.g. a
# RendezvousTimeoutError; set as that torchrun's TORCHELASTIC_ERROR_FILE (its ranks get their own).
AGENT_ERROR_FILE = "torchrun_error.json"
UNKNOWN = -1  # the global rank of a rank that wrote nothing, on a node where no rank did
NO_FILES = "ended without a result or an error (stopped by a signal, or by torchrun when another rank failed)"


# A rank of ddp_lib's launcher: the folder its launcher made for it (use_rank_dir). Not an environment
# variable, which the worker would see: ddp_lib.mp's ranks get none that torch.multiprocessing does not set.
_launcher_rank_dir: Path | None = None


def use_rank_dir(folder: str | os.PathLike) -> None:
    """In a rank of ddp_lib's launcher, before anything is written: this process's rank folder."""
    global _launcher_rank_dir
    _launcher_rank_dir = Path(folder)


def this_rank_dir() -> Path | None:
    """This rank's folder: the one ddp_lib's launcher made for it (:func:`use_rank_dir`), else under
    torchrun the folder of ``TORCHELASTIC_ERROR_FILE``; None for a process that has neither."""
    if _launcher_rank_dir is not None:
        return _launcher_rank_dir
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    return Path(path).parent if path else None


def error_file() -> Path | None:
    """Where this rank writes its error: ``error.json`` in its launcher's folder, else torchrun's
    ``TORCHELASTIC_ERROR_FILE``; None for a process that has neither."""
    if _launcher_rank_dir is not None:
        return _launcher_rank_dir / ERROR_FILE
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    return Path(path) if path else None


def stdout_in_folder() -> bool:
    """Whether this rank's stdout is its folder's ``stdout.log`` (torchrun's ``--redirects=1`` or ``3``)."""
    folder = this_rank_dir()
    try:
        here, there = os.fstat(1), os.stat(folder / STDOUT_FILE) if folder else None
    except OSError:
        return False
    return there is not None and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def nan_as_null(value, path: str = "") -> tuple[object, list[tuple[str, float]]]:
    """``value`` with every nan and inf float replaced by None (JSON has neither), and where each one was."""
    if isinstance(value, float):
        return (value, []) if math.isfinite(value) else (None, [(path, value)])
    if isinstance(value, dict):
        pairs = [(k, nan_as_null(v, f"{path}[{k!r}]")) for k, v in value.items()]
        # A key JSON cannot hold (a tuple) as its repr: pickled, the value keeps it.
        return ({k if k is None or isinstance(k, (str, int, float)) else repr(k): v for k, (v, _) in pairs},
                [b for _, (_, bad) in pairs for b in bad])
    if isinstance(value, (list, tuple)):
        items = [nan_as_null(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return [v for v, _ in items], [b for _, bad in items for b in bad]
    return value, []


def json_line(record: object) -> str:
    """``record`` as one line of valid JSON: nan and inf as null, values JSON cannot hold as their repr."""
    return json.dumps(nan_as_null(record)[0], default=repr, allow_nan=False)


def _write_whole(name: str, data: bytes) -> bool:
    """Write ``data`` to this rank's file ``name``, whole or not at all: a temporary file, then
    renamed. False when this process has no rank folder (not under torchrun)."""
    folder = this_rank_dir()
    if folder is None:
        return False
    partial = folder / f".{name}.{os.getpid()}"
    partial.write_bytes(data)
    os.replace(partial, folder / name)
    return True


def discard_partial(name: str) -> None:
    """Remove what :func:`_write_whole` left of ``name`` when its write failed (no room): its temporary file."""
    folder = this_rank_dir()
    if folder is not None:
        (folder / f".{name}.{os.getpid()}").unlink(missing_ok=True)


class ResultNotSent(Exception):
    """What a worker returned cannot be sent back (pickled); the message is the one line a rank's error says."""


def dump_result(value: object) -> bytes:
    """``value`` as the launcher's ranks and torchrun's send it back (the one serialisation of a
    result: pickle, so a tensor comes back a tensor, a dict a dict); ResultNotSent, with the
    reason in one line, for a value that cannot be pickled."""
    try:
        return pickle.dumps(value)
    except Exception as exc:
        # Not "raised ...": the worker returned; what failed is sending its value back.
        raise ResultNotSent(f"returned a value that cannot be pickled, so it cannot be sent back "
                            f"({type(exc).__qualname__}: {exc}); return plain data (numbers, strings, lists, "
                            "dicts, tensors)") from exc


def load_result(blob: bytes) -> object:
    """A result :func:`dump_result` made, in the launching process; the exception unpickling raised if it fails."""
    return pickle.loads(blob)


# What rank.json holds: where this rank stands in the job, as torchrun set it (-1 where unset).
PLACE_VARIABLES = {"rank": "RANK", "group_rank": "GROUP_RANK", "local_rank": "LOCAL_RANK",
                   "world_size": "WORLD_SIZE", "local_world_size": "LOCAL_WORLD_SIZE"}


def write_rank() -> bool:
    """Write this rank's place in the job (global rank, node's group rank, local rank, world size,
    ranks on its node) and its process id to its ``rank.json``, before it runs anything: a rank that then dies without a
    word is still read back under its own global rank (c10d numbers the nodes itself; folders do not
    say which is which), and a reader of the folder sees where it ran."""
    place = {key: int(os.environ.get(name, -1)) for key, name in PLACE_VARIABLES.items()}
    # Its process, for a person who wants its stack at once (kill -USR1: ddp_lib's ranks print it to stderr).
    return _write_whole(RANK_FILE, json_line({**place, "pid": os.getpid()}).encode())


def stack_files(folder: Path) -> tuple[Path, Path]:
    """Where a rank with this folder is asked for its stacks, and where it answers."""
    return folder / STACKS_REQUEST, folder / STACKS_FILE


def write_result(rank: int, result: object) -> bool:
    """Write ``{"rank": rank, "result": result, "pickle": ...}`` to this rank's ``result.json``, whole
    or not at all: ``result`` as JSON shows it (:func:`json_line`, for a person), ``pickle`` the value
    as :func:`dump_result` makes it (base64), which :func:`read_ranks` gives back. ResultNotSent for a
    result that cannot be pickled."""
    blob = base64.b64encode(dump_result(result)).decode("ascii")
    try:
        line = json_line({"rank": rank, "result": result, "pickle": blob})
    except Exception:  # no JSON view (a value that holds itself, a repr that raises): the pickle still has it
        line = json_line({"rank": rank, "result": f"<{type(result).__qualname__}, not shown as JSON>", "pickle": blob})
    return _write_whole(RESULT_FILE, line.encode())


def write_error(exc: BaseException) -> None:
    """Write ``exc`` (being handled) to this rank's error file (:func:`write_failure`), as torch's
    ``@record`` would, with its type name and message."""
    write_failure(failure_of(exc, str(exc), traceback.format_exc()), f"{type(exc).__name__}: {exc}")


def write_failure(failure: Failure, summary: str | None = None) -> bool:
    """Write ``failure`` to this rank's error file (:func:`error_file`), whole or not at all, as torch's
    ``ErrorHandler.record_exception`` does (``elastic/multiprocessing/errors/error_handler.py``), the
    JSON torchrun's agent reads back for its failure summary (``summary``, "Type: message", by default
    made from the failure), with the rank's record of it added (``extraInfo.ddp_lib``: type, message,
    and whether it may be a peer's echo, as :class:`ddp_lib.errors.Failure` holds them, which
    :func:`read_failure` gives back as it was). Written here rather than through torch's handler:
    importing it imports torch, a second or more. False for a process without an error file."""
    path = error_file()
    if path is None:
        return False
    if summary is None:
        summary = f"{failure.exc_type}: {failure.message}" if failure.exc_type else failure.message
    stamp = failure.time if failure.time is not None else time.time()
    data = {"message": {"message": summary,
                        "extraInfo": {"py_callstack": failure.traceback, "timestamp": str(int(stamp)),
                                      "ddp_lib": {"type": failure.exc_type, "message": failure.message,
                                                  "echo": failure.echo, "time": failure.time,
                                                  "port": failure.port}}}}
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(data))
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    return True


def read_failure(path: Path | str) -> Failure | None:
    """The failure in an error file in torch's format (written by :func:`write_error`, or by torch's
    own ``@record``: then its type is the part of torch's "Type: message" before the first ": ",
    and its time torch's timestamp), or None if there is none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message", "")
    if not isinstance(message, dict):
        return Failure("", str(message))
    info = message.get("extraInfo", {}) if isinstance(message.get("extraInfo"), dict) else {}
    tb = str(info.get("py_callstack", ""))
    own = info.get("ddp_lib")
    if isinstance(own, dict):
        return Failure(str(own.get("type", "")), str(own.get("message", "")), tb, bool(own.get("echo")),
                       own.get("time"), own.get("port"))
    exc_type, _, text = str(message.get("message", "")).partition(": ")
    stamp = str(info.get("timestamp", ""))
    # Without ddp_lib's record (torch's own @record wrote it), only the type says it: a Dist*Error may be a
    # peer's echo; a RuntimeError is the rank's own (where it was raised is not recorded).
    return Failure(exc_type, text, tb, exc_type.startswith("Dist"), float(stamp) if stamp.isdigit() else None)


def read_error(path: Path | str) -> tuple[str, str] | None:
    """``("Type: message", traceback)`` from an error file in torch's format, or None if there is none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message", "")
    if isinstance(message, dict):  # ErrorHandler.record_exception's layout
        return str(message.get("message", "")), str(message.get("extraInfo", {}).get("py_callstack", ""))
    return str(message), ""


# How Python's traceback joins an exception to the one it was raised from (``raise ... from ...``).
_DIRECT_CAUSE = "\nThe above exception was the direct cause of the following exception:\n"


def first_of_chain(message: str, traceback_text: str) -> str:
    """For an exception raised from another (``raise ... from``), the first one, as the last line of its
    part of the traceback gives it (``module.Type: message``): what went wrong before it was wrapped
    (torch's ``RendezvousConnectionError`` says only "See inner exception for details"). Else ``message``."""
    if _DIRECT_CAUSE not in traceback_text:
        return message
    lines = [line for line in traceback_text.split(_DIRECT_CAUSE, 1)[0].splitlines() if line.strip()]
    return lines[-1].strip() if lines else message


def agent_error(log_dir: Path | str) -> str:
    """What a torchrun run by ddp_lib with this ``--log-dir`` raised itself ("Type: message"): its own
    error (a rendezvous that timed out), or the first failed rank's, which torch's ``record`` copies
    into the agent's file on ``ChildFailedError``; the first of a chain of exceptions
    (:func:`first_of_chain`); "" if it wrote none."""
    found = read_error(Path(log_dir) / AGENT_ERROR_FILE)
    if not found:
        return ""
    return first_of_chain(found[0].rstrip(": ").strip(), found[1])


@dataclass
class RankFiles:
    """What one rank left in its folder."""

    rank: int  # its global rank; UNKNOWN (-1) if neither it nor a rank of its node wrote one
    folder: Path
    finished: bool  # it wrote result.json
    result: object = None
    error: str = ""  # "Type: message", from error.json
    traceback: str = ""
    failure: Failure | None = None  # the failure its error.json records, if any
    stdout: str = ""
    stderr: str = ""


def _read(path: Path) -> str:
    """A rank's output file as it would stay on screen (as the launcher reads its ranks'): a line
    redrawn with carriage returns, a progress bar, is one line in its last state."""
    try:
        return output_text(path.read_bytes())
    except OSError:
        return ""


def _attempt_dir(run: Path, attempt: int | None) -> Path | None:
    """The folder of ``attempt`` (default: the last) of one torchrun's run folder; None if it has none."""
    attempts = {int(p.name.removeprefix("attempt_")): p for p in run.glob("attempt_*") if p.is_dir()}
    if attempt is None:
        return attempts[max(attempts)] if attempts else None
    if attempt not in attempts:
        raise ValueError(f"{run}: no attempt_{attempt} (attempts are counted per node: this node's restart "
                         f"count differs; it has {', '.join(sorted(p.name for p in attempts.values())) or 'none'})")
    return attempts[attempt]


def _is_run(folder: Path) -> bool:
    return any(p.is_dir() for p in folder.glob("attempt_*"))


def runs_in(log_dir: Path | str) -> list[Path]:
    """The run folders (``<run id>_<random>``, one per torchrun that started ranks) in a ``--log-dir``."""
    return sorted(p for p in Path(log_dir).glob("*_*") if p.is_dir() and _is_run(p))


def _runs(folders: list[Path | str]) -> list[Path]:
    """Each folder as a run folder: itself, or the one run folder of a ``--log-dir``. A log folder
    that holds several runs (torch reuses a ``--log-dir`` for every run) must be given as run folders."""
    runs = []
    for folder in map(Path, folders):
        if _is_run(folder):
            runs.append(folder)
            continue
        found = runs_in(folder)
        if len(found) > 1:
            raise ValueError(f"{folder} holds {len(found)} runs ({', '.join(p.name for p in found)}): "
                             "give the run folders of this job instead")
        runs += found
    return runs


def _load(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _load_result(path: Path) -> tuple[dict, str]:
    """The record in ``result.json`` ({} if none), its ``result`` the value :func:`write_result`
    pickled (a record without one keeps its JSON value), and why it could not be read back ("" if it could)."""
    record = _load(path)
    if "pickle" not in record:
        return record, ""
    try:
        record["result"] = load_result(base64.b64decode(record.pop("pickle")))
    except Exception as exc:
        return {}, f"{type(exc).__qualname__}: its return value cannot be unpickled in the launching process: {exc}"
    return record, ""


def read_output(folder: Path | str) -> tuple[str, str]:
    """A rank's (stdout, stderr) from its folder, as they stay on screen ("" for a file it has not)."""
    return _read(Path(folder) / STDOUT_FILE), _read(Path(folder) / STDERR_FILE)


def read_rank(folder: Path | str, output: bool = True) -> RankFiles:
    """What one rank left in its folder, a torchrun's rank's or one of ddp_lib's launcher: its place,
    its result (unpickled) or its error as the :class:`ddp_lib.errors.Failure` it wrote (a result that
    cannot be unpickled here is its failure too, in one line), and with ``output`` its stdout and stderr."""
    folder = Path(folder)
    (record, unreadable), place = _load_result(folder / RESULT_FILE), _load(folder / RANK_FILE)
    failure = read_failure(folder / ERROR_FILE)
    if failure is None and unreadable:
        failure = Failure(*unreadable.split(": ", 1))
    error = (f"{failure.exc_type}: {failure.message}" if failure.exc_type else failure.message) if failure else ""
    rank = place.get("rank", record.get("rank", UNKNOWN))
    stdout, stderr = read_output(folder) if output else ("", "")
    return RankFiles(rank if isinstance(rank, int) else UNKNOWN, folder, bool(record), record.get("result"),
                     error, failure.traceback if failure else "", failure, stdout, stderr)


def read_ranks(folders: list[Path | str], attempt: int | None = None) -> list[RankFiles]:
    """Every rank's files in these folders (each a torchrun's ``--log-dir`` holding one run, or a run
    folder), in global-rank order: each run folder is one node, its last attempt (or ``attempt``)
    read. A rank's global rank is the one it wrote in ``rank.json`` (or ``result.json``); a rank
    that wrote neither takes it from a rank of its node that did (a node's ranks are consecutive,
    ``_assign_worker_ranks`` in ``elastic/agent/server/api.py``), or from its local rank when the
    job had one node. Otherwise it is unknown (-1), and listed last: never guessed from folder order."""
    runs = _runs(folders)
    nodes = [sorted((p for p in attempt_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
             for run in runs if (attempt_dir := _attempt_dir(run, attempt)) is not None]
    ranks = []
    for folders_of_node in nodes:
        node = [read_rank(folder) for folder in folders_of_node]
        known = [r.rank - int(r.folder.name) for r in node if r.rank != UNKNOWN]
        first = known[0] if known else 0 if len(nodes) == 1 else None
        for r in node:
            if r.rank == UNKNOWN and first is not None:
                r.rank = first + int(r.folder.name)
        ranks += node
    return sorted(ranks, key=lambda r: (r.rank == UNKNOWN, r.rank, str(r.folder)))


@dataclass
class RunFiles:
    """What the ranks of one job left: results in rank order, the other lines they printed, and
    the failure as the launcher reports one."""

    ranks: list[RankFiles]
    results: list = field(default_factory=list)  # the results of the ranks that finished, in rank order
    lines: list[str] = field(default_factory=list)  # every rank's stdout lines, in rank order
    error: WorkerError | None = None


def failure(ranks: list[RankFiles]) -> WorkerError | None:
    """The ranks' failure as a ``WorkerError``, or None when every rank finished (or no rank left a
    folder: torchrun failed before starting them, see :func:`agent_error`). Blamed as the launcher
    blames (``errors.blamed_rank``): the lowest rank that failed on its own, not as the echo of a
    peer's failure. A rank with neither a result nor an error (killed by a signal, or stopped by
    torchrun after another rank failed) is blamed when no rank wrote an error, or when every error
    written is a peer's echo: a rank killed by a signal (out of memory, a segfault) writes nothing,
    and its peers' collectives then break."""
    if all(r.finished for r in ranks):
        return None
    raised = {r.rank: r.failure or Failure(*r.error.partition(": ")[::2], r.traceback) for r in ranks if r.error}
    silent = [r.rank for r in ranks if not r.finished and not r.error]
    failures, _ = with_silent_ranks(raised, silent, ended=NO_FILES)
    return WorkerError.blaming(failures, {r.rank: (r.stdout, r.stderr) for r in ranks}, whole=True)


def read_run(folders: list[Path | str], attempt: int | None = None) -> RunFiles:
    """Every rank's result, output lines and the job's failure, from these folders (as :func:`read_ranks`)."""
    ranks = read_ranks(folders, attempt)
    lines = [line for r in ranks for line in r.stdout.splitlines() if line.strip()]
    return RunFiles(ranks, [r.result for r in ranks if r.finished], lines, failure(ranks))
