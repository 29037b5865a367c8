"""Each rank's result, output and error, written to one folder per rank and read back in rank order:
the one channel of every job run by torchrun, on one machine, on several hosts or under SLURM.

``torchrun --log-dir=DIR --redirects=3`` gives each local rank of each node a folder of its own,
``DIR/<run id>_<random>/attempt_<N>/<local rank>/`` (``DefaultLogsSpecs.reify``,
``torch/distributed/elastic/multiprocessing/api.py``), holding its ``stdout.log`` and ``stderr.log``,
and names ``error.json`` there in the rank's ``TORCHELASTIC_ERROR_FILE``, where ``@record`` writes
the exception that ends the rank. A rank run by ``ddp_lib`` writes what it returns beside it, in
``result.json``. Ranks of one node hold consecutive global ranks, from the node's first
(``_assign_worker_ranks``, ``elastic/agent/server/api.py``).

Imports no torch: a rank that only reads its environment starts and fails in a fraction of a second.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ddp_lib.errors import WorkerError, blamed_rank, first_line

RESULT_FILE = "result.json"
ERROR_FILE = "error.json"
# Where a torchrun run by ddp_lib writes its own exception (its main is wrapped in @record), e.g. a
# RendezvousTimeoutError; set as that torchrun's TORCHELASTIC_ERROR_FILE (its ranks get their own).
AGENT_ERROR_FILE = "torchrun_error.json"
NO_FILES = "ended without a result or an error (stopped by a signal, or by torchrun when another rank failed)"


def this_rank_dir() -> Path | None:
    """This rank's folder under torchrun (the folder of ``TORCHELASTIC_ERROR_FILE``), or None."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    return Path(path).parent if path else None


def stdout_in_folder() -> bool:
    """Whether this rank's stdout is its folder's ``stdout.log`` (torchrun's ``--redirects=1`` or ``3``)."""
    folder = this_rank_dir()
    try:
        here, there = os.fstat(1), os.stat(folder / "stdout.log") if folder else None
    except OSError:
        return False
    return there is not None and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def write_result(rank: int, result: object) -> bool:
    """Write ``{"rank": rank, "result": result}`` to this rank's ``result.json`` (values JSON cannot
    hold as their repr), whole or not at all: a temporary file, then renamed. False when this
    process has no rank folder (not under torchrun)."""
    folder = this_rank_dir()
    if folder is None:
        return False
    text = json.dumps({"rank": rank, "result": result}, default=repr)
    partial = folder / f".{RESULT_FILE}.{os.getpid()}"
    partial.write_text(text)
    os.replace(partial, folder / RESULT_FILE)
    return True


def write_error(exc: BaseException) -> None:
    """Write ``exc`` (being handled) to ``TORCHELASTIC_ERROR_FILE`` as torch's
    ``ErrorHandler.record_exception`` does (``elastic/multiprocessing/errors/error_handler.py``), the
    JSON torchrun's agent reads back for its failure summary. Written here rather than through
    torch's handler: importing it imports torch, a second or more."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": f"{type(exc).__name__}: {exc}",
                        "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
    with open(path, "w") as f:
        json.dump(data, f)


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

    rank: int
    folder: Path
    finished: bool  # it wrote result.json
    result: object = None
    error: str = ""  # "Type: message", from error.json
    traceback: str = ""
    stdout: str = ""
    stderr: str = ""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _attempt(run: Path, attempt: int | None) -> Path | None:
    """The folder of ``attempt`` (default: the last) of one torchrun's run folder."""
    attempts = {int(p.name.removeprefix("attempt_")): p for p in run.glob("attempt_*") if p.is_dir()}
    if not attempts:
        return None
    return attempts.get(max(attempts) if attempt is None else attempt)


def _rank_files(folder: Path) -> RankFiles:
    finished = (folder / RESULT_FILE).is_file()
    record = json.loads(_read(folder / RESULT_FILE)) if finished else {}
    error, tb = read_error(folder / ERROR_FILE) or ("", "")
    return RankFiles(record.get("rank", -1), folder, finished, record.get("result"), error, tb,
                     _read(folder / "stdout.log"), _read(folder / "stderr.log"))


def read_ranks(log_dirs: list[Path | str], attempt: int | None = None) -> list[RankFiles]:
    """Every rank's files under these ``--log-dir`` folders, in global-rank order: each torchrun's run
    folder is one node, its last attempt (or ``attempt``) read. A node's first global rank comes
    from a ``result.json`` among its ranks; where none has one, it takes the next global ranks that
    no such node holds, nodes taken in the order given (a folder per node, in node-rank order,
    makes that exact)."""
    nodes = [sorted((p for p in attempt_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
             for log_dir in log_dirs for run in sorted(Path(log_dir).glob("*_*")) if run.is_dir()
             if (attempt_dir := _attempt(run, attempt)) is not None]
    read = [[_rank_files(folder) for folder in folders] for folders in nodes]
    known = {i: done[0].rank - int(done[0].folder.name) for i, node in enumerate(read)
             if (done := [r for r in node if r.finished])}
    taken = sorted((first, first + len(read[i])) for i, first in known.items())
    ranks, cursor = [], 0
    for i, node in enumerate(read):
        first = known.get(i)
        if first is None:  # the next global ranks that no node with a result holds
            first = cursor
            for start, end in taken:
                if first < end and start < first + len(node):
                    first = end
            taken = sorted([*taken, (first, first + len(node))])
        for r in node:
            r.rank = first + int(r.folder.name)
        ranks += node
        cursor = first + len(node)
    return sorted(ranks, key=lambda r: r.rank)


@dataclass
class RunFiles:
    """What the ranks of one job left: results in rank order, the other lines they printed, and
    the failure as the launcher reports one."""

    ranks: list[RankFiles]
    results: list = field(default_factory=list)  # the results of the ranks that finished, in rank order
    lines: list[str] = field(default_factory=list)  # every rank's stdout lines, in rank order
    error: WorkerError | None = None


def failure(ranks: list[RankFiles]) -> WorkerError | None:
    """The ranks' failure as a ``WorkerError``, blamed as the launcher blames (``errors.blamed_rank``:
    the lowest rank that failed on its own, not as the echo of a peer's failure), or None when every
    rank finished. A rank with neither a result nor an error (killed by a signal, or stopped by
    torchrun after another rank failed) is blamed only when no rank wrote an error. None also when
    no rank left a folder (torchrun failed before starting them: see :func:`agent_error`)."""
    if all(r.finished for r in ranks):  # none at all: torchrun started no rank (its own error says why)
        return None
    raised = {r.rank: (*r.error.partition(": ")[::2], r.traceback) for r in ranks if r.error}
    failures = raised or {r.rank: ("", NO_FILES, "") for r in ranks if not r.finished}
    rank = blamed_rank(failures)
    exc_type, message, tb = failures[rank]
    described = {r: f"{t}: {first_line(m)}" if t else first_line(m) for r, (t, m, _) in failures.items()}
    error = WorkerError(rank, exc_type, first_line(message), tb, described,
                        {r.rank: (r.stdout, r.stderr) for r in ranks})
    error.full_message = message.strip()
    return error


def read_run(log_dirs: list[Path | str], attempt: int | None = None) -> RunFiles:
    """Every rank's result, output lines and the job's failure, from these ``--log-dir`` folders."""
    ranks = read_ranks(log_dirs, attempt)
    lines = [line for r in ranks for line in r.stdout.splitlines() if line.strip()]
    return RunFiles(ranks, [r.result for r in ranks if r.finished], lines, failure(ranks))
