"""A signal sent to torchrun itself (lesson 06): which signals reach its ranks.

Each case starts ``torchrun --standalone --nproc-per-node=1`` whose one rank writes its process id
and sleeps, sends one signal to torchrun's process only, waits for torchrun to end, then asks
whether the rank still runs (and ends it if so). The rank imports no torch, so a case takes about
as long as torchrun's own start. The cases run side by side.

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

# name: (the signal sent to torchrun, its --signals-to-handle, whether the rank handles SIGUSR1)
CASES = {
    "SIGUSR1, not listed": ("SIGUSR1", DEFAULT_SIGNALS, False),
    "SIGUSR1, listed, rank without a handler": ("SIGUSR1", WITH_USR1, False),
    "SIGUSR1, listed, rank with a handler": ("SIGUSR1", WITH_USR1, True),
}


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(folder: Path, name: str, signals: str, handler: bool) -> subprocess.Popen:
    rank_args = [str(folder / f"{name}.pid"), str(folder / f"{name}.saved"), "handle" if handler else "plain"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           f"--signals-to-handle={signals}", "-m", "ddp_lib.demos.torchrun_signals", *rank_args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(folder / f"{name}.err", "w"), env=env)


def send_to_torchrun(timeout: float = 120.0) -> dict[str, dict]:
    """Run every case of ``CASES`` at once. For each: torchrun's exit code, whether its rank still
    ran after torchrun ended, and whether the rank's SIGUSR1 handler saved its file."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="torchrun-signals-") as tmp:
        folder = Path(tmp)
        procs = {}
        for i, (name, (_, signals, handler)) in enumerate(CASES.items()):
            procs[name] = _start(folder, f"case{i}", signals, handler)
        deadline = time.monotonic() + timeout
        rank_pids = {}
        try:
            for i, (name, (sig, _, _)) in enumerate(CASES.items()):
                pid_file = folder / f"case{i}.pid"
                while not pid_file.exists():  # the rank is running, its handler (if any) installed
                    if time.monotonic() > deadline or procs[name].poll() is not None:
                        raise RuntimeError(f"case {name!r}: the rank never started; torchrun said:\n"
                                           + (folder / f"case{i}.err").read_text()[-2000:])
                    time.sleep(0.05)
                rank_pids[name] = int(pid_file.read_text())
                os.kill(procs[name].pid, signal.Signals[sig])  # torchrun's process only
            for i, name in enumerate(CASES):
                code = procs[name].wait(timeout=max(1.0, deadline - time.monotonic()))
                time.sleep(0.2)  # a rank that the signal ended has exited by now
                results[name] = {"torchrun_exit": code, "rank_alive": _alive(rank_pids[name]),
                                 "rank_saved": (folder / f"case{i}.saved").exists()}
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for pid in rank_pids.values():  # a rank left running by its torchrun
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
    return results


def _rank(pid_file: str, saved_file: str, mode: str) -> None:
    """torchrun's program: optionally handle SIGUSR1 by "saving" (writing a file) and exiting, then
    announce the process id (written whole) and sleep."""
    if mode == "handle":
        def save_and_exit(signum, frame):
            Path(saved_file).write_text("snapshot")
            sys.exit(0)
        signal.signal(signal.SIGUSR1, save_and_exit)
    Path(pid_file + ".tmp").write_text(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(60)


if __name__ == "__main__":
    if len(sys.argv) == 4:
        _rank(*sys.argv[1:])
    else:
        for case, result in send_to_torchrun().items():
            print(f"{case}: {result}")
