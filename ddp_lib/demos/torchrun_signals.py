"""A rank that hangs, and a signal sent to torchrun itself (lesson 06): what torchrun does about each.

Two torchruns, side by side: ``sleeper``, with the default ``--signals-to-handle`` and one rank, and
``listed``, with SIGUSR2 listed and two ranks. The second rank is set up as lesson 06's ``train.py`` would
be for SLURM: ``faulthandler`` prints its stack on SIGUSR1, and a handler "saves a checkpoint" on SIGUSR2.
Each rank writes its process id and sleeps. ``sleeper`` is first watched for ``HANG_S`` seconds: its agent
leaves a rank that has not ended alone. Then the second rank of ``listed`` is sent SIGUSR1 (it must print its
stack and run on), and each torchrun's process alone is sent SIGUSR2; once torchrun ends, the
module asks whether each rank still runs (and ends it if so). The ranks import no torch, so the whole
takes about as long as torchrun's own start, plus ``HANG_S``. Lesson 06 starts the two jobs beside its
other small jobs (:mod:`ddp_lib.demos.torchrun_batch`) with :func:`start`, and ends them with :func:`finish`.

    python -m ddp_lib.demos.torchrun_signals
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # --signals-to-handle's default in torch's run.py
WITH_USR2 = DEFAULT_SIGNALS + ",SIGUSR2"  # SIGUSR1 stays the stack-dump signal
HANG_S = 1.0  # how long the job "sleeper" is watched with its rank asleep, before any signal

# The torchruns: name -> (the signal sent to torchrun, its --signals-to-handle, whether each local rank
# has the handlers: faulthandler on SIGUSR1, a save on SIGUSR2). Two jobs, for three cases: the listed
# job's two ranks differ only by the handlers.
JOBS = {
    "sleeper": ("SIGUSR2", DEFAULT_SIGNALS, (False,)),  # first watched as a rank that hangs, then signalled
    "listed": ("SIGUSR2", WITH_USR2, (False, True)),
}
# case name -> (job, local rank)
CASES = {
    "SIGUSR2, not listed": ("sleeper", 0),
    "SIGUSR2, listed, rank without a handler": ("listed", 0),
    "SIGUSR2, listed, rank with a handler": ("listed", 1),
}
STACK_RANK = ("listed", 1)  # the rank sent SIGUSR1 directly, before any signal to torchrun
STACK_LINE = "in _rank"  # a line of the stack faulthandler prints: the function the rank sleeps in


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _command(folder: Path, job: str) -> list[str]:
    """The torchrun command of ``job``: its ``--signals-to-handle`` and one rank per entry of its handlers."""
    _, signals, handlers = JOBS[job]
    modes = ",".join("handle" if handler else "plain" for handler in handlers)
    listed = [] if signals == DEFAULT_SIGNALS else [f"--signals-to-handle={signals}"]  # the default goes unsaid
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={len(handlers)}",
            *listed, "-m", "ddp_lib.demos.torchrun_signals", str(folder / job), modes]


@dataclass
class Watch:
    """The torchruns of :data:`JOBS`, started and not yet signalled: their commands, their processes,
    the variables the job ``sleeper`` was given on top of this process's environment, and their folder."""

    commands: dict[str, list[str]]
    procs: dict[str, subprocess.Popen]
    sleeper_env: dict[str, str]
    folder: Path
    _tmp: tempfile.TemporaryDirectory = field(repr=False)


def start(sleeper_env: dict[str, str] | None = None) -> Watch:
    """Start the torchruns of :data:`JOBS` side by side, the job ``sleeper`` with ``sleeper_env`` added to its
    environment, and return at once: :func:`finish` watches them and sends the signals."""
    tmp = tempfile.TemporaryDirectory(prefix="torchrun-signals-")
    folder = Path(tmp.name)
    sleeper_env = dict(sleeper_env or {})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    commands = {job: _command(folder, job) for job in JOBS}
    procs = {job: subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(folder / f"{job}.err", "w"),
                                   env={**env, **sleeper_env} if job == "sleeper" else env)
             for job, command in commands.items()}
    return Watch(commands, procs, sleeper_env, folder, tmp)


def _rank_file(watch: Watch, job: str, local_rank: int, deadline: float) -> dict:
    """What local rank ``local_rank`` of ``job`` wrote once it ran, its handler (if any) installed;
    waits for it, and raises if the job ends first or ``deadline`` passes."""
    path = watch.folder / f"{job}.{local_rank}.json"
    while not path.exists():
        if time.monotonic() > deadline or watch.procs[job].poll() is not None:
            raise RuntimeError(f"job {job!r}: local rank {local_rank} never started; torchrun said:\n"
                               + (watch.folder / f"{job}.err").read_text()[-2000:])
        time.sleep(0.05)
    return {**json.loads(path.read_text()), "written": path.stat().st_mtime}


def finish(watch: Watch, timeout: float = 120.0) -> dict:
    """Watch the torchruns that :func:`start` started, then signal them. First the job ``sleeper``: once
    its rank has slept ``HANG_S`` seconds, whether its torchrun and its rank still run, whether the
    rank is still the first one (no restart), and the rank's restart count and
    ``TORCHELASTIC_USE_AGENT_STORE``. Then the rank :data:`STACK_RANK` alone gets SIGUSR1 (``"stack"``:
    whether it printed its stack and still runs). Then each torchrun's process alone gets its signal. For
    each case of :data:`CASES`: torchrun's exit code, whether the rank ran in a session of its own (not
    torchrun's) before the signal, whether it still ran after torchrun ended, and whether its SIGUSR2
    handler saved its file. Every process is ended before this returns."""
    procs = watch.procs
    deadline = time.monotonic() + timeout
    ranks = {}  # (job, local rank) -> what the rank wrote
    own_session = {}  # (job, local rank) -> whether the rank runs in a session other than torchrun's
    try:
        for job, (_, _, handlers) in JOBS.items():
            for local_rank in range(len(handlers)):
                ranks[job, local_rank] = rank = _rank_file(watch, job, local_rank, deadline)
                # a session of its own: the rank leads its session, and torchrun is in another one
                rank_sid = os.getsid(rank["pid"])
                own_session[job, local_rank] = rank_sid == rank["pid"] and rank_sid != os.getsid(procs[job].pid)
        hung = ranks["sleeper", 0]
        time.sleep(max(0.0, hung["written"] + HANG_S - time.time()))  # the rank has slept HANG_S seconds by now
        hang = {"slept_s": HANG_S, "torchrun_alive": procs["sleeper"].poll() is None, "rank_alive": _alive(hung["pid"]),
                "same_rank": json.loads((watch.folder / "sleeper.0.json").read_text())["pid"] == hung["pid"],
                "restart_count": hung["restart_count"], "use_agent_store": hung["use_agent_store"]}
        stack_pid = ranks[STACK_RANK]["pid"]
        err = watch.folder / f"{STACK_RANK[0]}.err"  # the ranks' stderr is their torchrun's
        os.kill(stack_pid, signal.SIGUSR1)  # kill -USR1 <pid>: faulthandler prints the stack
        until = min(deadline, time.monotonic() + 10)
        while STACK_LINE not in err.read_text() and time.monotonic() < until:
            time.sleep(0.05)
        time.sleep(0.2)  # had SIGUSR1 ended the rank, it would have exited by now
        stack = {"stack_printed": STACK_LINE in err.read_text(), "rank_alive": _alive(stack_pid),
                 "saved": (watch.folder / f"{STACK_RANK[0]}.{STACK_RANK[1]}.saved").exists()}
        for job, (sig, _, _) in JOBS.items():
            os.kill(procs[job].pid, signal.Signals[sig])  # torchrun's process only
        codes = {job: proc.wait(timeout=max(1.0, deadline - time.monotonic())) for job, proc in procs.items()}
        time.sleep(0.2)  # a rank that the signal ended has exited by now
        cases = {name: {"torchrun_exit": codes[job], "rank_alive": _alive(ranks[job, local_rank]["pid"]),
                        "rank_saved": (watch.folder / f"{job}.{local_rank}.saved").exists(),
                        "rank_own_session": own_session[job, local_rank]}
                 for name, (job, local_rank) in CASES.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for rank in ranks.values():  # a rank left running by its torchrun
            if _alive(rank["pid"]):
                os.kill(rank["pid"], signal.SIGKILL)
        watch._tmp.cleanup()
    return {"sleeper": hang, "stack": stack, "cases": cases}


def _rank(prefix: str, modes: str) -> None:
    """torchrun's program: this local rank's mode (``modes``, one per local rank) says whether it
    has lesson 06's ``train.py`` line ``faulthandler.register(signal.SIGUSR1)``, and handles SIGUSR2 by
    "saving" (writing ``PREFIX.N.saved``) and exiting. It then writes its process
    id, restart count and ``TORCHELASTIC_USE_AGENT_STORE`` to ``PREFIX.N.json`` (whole) and sleeps:
    to its agent, a rank that sleeps is a rank that hangs, a process that has not ended."""
    local_rank = int(os.environ["LOCAL_RANK"])
    if modes.split(",")[local_rank] == "handle":
        faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints this rank's stack; it runs on

        def save_and_exit(signum, frame):
            Path(f"{prefix}.{local_rank}.saved").write_text("snapshot")
            sys.exit(0)
        signal.signal(signal.SIGUSR2, save_and_exit)  # the checkpoint signal
    seen = {"pid": os.getpid(), "restart_count": os.environ["TORCHELASTIC_RESTART_COUNT"],
            "use_agent_store": os.environ["TORCHELASTIC_USE_AGENT_STORE"]}
    Path(f"{prefix}.{local_rank}.json.tmp").write_text(json.dumps(seen))
    os.replace(f"{prefix}.{local_rank}.json.tmp", f"{prefix}.{local_rank}.json")  # whole or not at all
    time.sleep(600)  # ended by the signal, or by finish()


if __name__ == "__main__":
    if len(sys.argv) == 3:
        _rank(*sys.argv[1:])
    else:
        results = finish(start())
        print("sleeper:", results["sleeper"])
        print("SIGUSR1 to the rank:", results["stack"])
        for case, result in results["cases"].items():
            print(f"{case}: {result}")
