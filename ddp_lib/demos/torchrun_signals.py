"""A signal sent to torchrun itself (lesson 06): which signals reach its ranks.

Two torchruns, side by side: one with the default ``--signals-to-handle`` and one rank, one with
SIGUSR1 listed and two ranks, the second of which handles SIGUSR1. Each rank writes its process id
and sleeps. Each torchrun's process alone is sent SIGUSR1; once torchrun ends, the module asks
whether each rank still runs (and ends it if so). The ranks import no torch, so the whole takes
about as long as torchrun's own start.

    python -m ddp_lib.demos.torchrun_signals
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # --signals-to-handle's default in torch's run.py
WITH_USR1 = DEFAULT_SIGNALS + ",SIGUSR1"

# The torchruns: name -> (the signal sent to torchrun, its --signals-to-handle, whether each local rank
# handles SIGUSR1). Two jobs, for three cases: the listed job's two ranks differ only by the handler.
JOBS = {
    "unlisted": ("SIGUSR1", DEFAULT_SIGNALS, (False,)),
    "listed": ("SIGUSR1", WITH_USR1, (False, True)),
}
# case name -> (job, local rank)
CASES = {
    "SIGUSR1, not listed": ("unlisted", 0),
    "SIGUSR1, listed, rank without a handler": ("listed", 0),
    "SIGUSR1, listed, rank with a handler": ("listed", 1),
}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(folder: Path, job: str, signals: str, handlers: tuple[bool, ...]) -> subprocess.Popen:
    modes = ",".join("handle" if handler else "plain" for handler in handlers)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={len(handlers)}",
           f"--signals-to-handle={signals}", "-m", "ddp_lib.demos.torchrun_signals", str(folder / job), modes]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(folder / f"{job}.err", "w"), env=env)


def send_to_torchrun(timeout: float = 120.0) -> dict[str, dict]:
    """Run the torchruns of ``JOBS`` at once, and send each its signal once all its ranks run. For each
    case of ``CASES``: torchrun's exit code, whether the rank ran in a session of its own (not
    torchrun's) before the signal, whether it still ran after torchrun ended, and whether its SIGUSR1
    handler saved its file."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="torchrun-signals-") as tmp:
        folder = Path(tmp)
        procs = {job: _start(folder, job, signals, handlers) for job, (_, signals, handlers) in JOBS.items()}
        deadline = time.monotonic() + timeout
        rank_pids = {}  # (job, local rank) -> pid
        own_session = {}  # (job, local rank) -> whether the rank runs in a session other than torchrun's
        try:
            for job, (sig, _, handlers) in JOBS.items():
                for local_rank in range(len(handlers)):
                    pid_file = folder / f"{job}.{local_rank}.pid"
                    while not pid_file.exists():  # the rank is running, its handler (if any) installed
                        if time.monotonic() > deadline or procs[job].poll() is not None:
                            raise RuntimeError(f"job {job!r}: local rank {local_rank} never started; torchrun said:\n"
                                               + (folder / f"{job}.err").read_text()[-2000:])
                        time.sleep(0.05)
                    rank_pids[job, local_rank] = int(pid_file.read_text())
                    # a session of its own: the rank leads its session, and torchrun is in another one
                    rank_sid = os.getsid(rank_pids[job, local_rank])
                    own_session[job, local_rank] = (rank_sid == rank_pids[job, local_rank]
                                                    and rank_sid != os.getsid(procs[job].pid))
                os.kill(procs[job].pid, signal.Signals[sig])  # torchrun's process only
            codes = {job: proc.wait(timeout=max(1.0, deadline - time.monotonic())) for job, proc in procs.items()}
            time.sleep(0.2)  # a rank that the signal ended has exited by now
            for name, (job, local_rank) in CASES.items():
                results[name] = {"torchrun_exit": codes[job], "rank_alive": _alive(rank_pids[job, local_rank]),
                                 "rank_saved": (folder / f"{job}.{local_rank}.saved").exists(),
                                 "rank_own_session": own_session[job, local_rank]}
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for pid in rank_pids.values():  # a rank left running by its torchrun
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
    return results


def _rank(prefix: str, modes: str) -> None:
    """torchrun's program: this local rank's mode (``modes``, one per local rank) says whether it
    handles SIGUSR1 by "saving" (writing ``PREFIX.N.saved``) and exiting. It then announces its process
    id in ``PREFIX.N.pid`` (written whole) and sleeps."""
    local_rank = int(os.environ["LOCAL_RANK"])
    if modes.split(",")[local_rank] == "handle":
        def save_and_exit(signum, frame):
            Path(f"{prefix}.{local_rank}.saved").write_text("snapshot")
            sys.exit(0)
        signal.signal(signal.SIGUSR1, save_and_exit)
    pid_file = f"{prefix}.{local_rank}.pid"
    Path(pid_file + ".tmp").write_text(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(60)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        _rank(*sys.argv[1:])
    else:
        for case, result in send_to_torchrun().items():
            print(f"{case}: {result}")
