"""Workers and helpers for tests/test_stress_pids.py: a process that takes the id a finished
rank had, as a rank of another job would once the machine's ids wrap around."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"  # the id the next new process gets, minus one (root)


def can_choose_pids() -> bool:
    """Whether this process may set the id the next new process gets (root on Linux)."""
    return os.access(NS_LAST_PID, os.W_OK)


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")  # not even a zombie: the id is free again


def take_pid(pid: int, tries: int = 50) -> int | None:
    """Start, outside this process's tree, a process with id ``pid`` that leads a session of
    its own (as each rank does) and sleeps for a minute; return its id, or None if other new
    processes on the machine kept taking the id first."""
    for _ in range(tries):
        if not _gone(pid):
            return None  # another new process got it first
        read_end, write_end = os.pipe()
        middle = os.fork()
        if middle == 0:  # the middle process exits at once, so the taker belongs to no one here
            os.close(read_end)
            with open(NS_LAST_PID, "w") as f:
                f.write(str(pid - 1))
            if os.fork() == 0:
                os.setsid()
                os.write(write_end, str(os.getpid()).encode())  # only once it leads its group
                os.execv("/bin/sleep", ["sleep", "60"])  # the pipe closes here (close-on-exec)
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as f:
            taker = int(f.read() or 0)
        os.waitpid(middle, 0)
        if taker == pid:
            return taker
        if taker:
            try:
                os.kill(taker, 9)  # it has just started under an id nobody recorded: it is ours
            except ProcessLookupError:
                pass
    return None


def rank_one_pid_taken(rank: int, world_size: int, record_dir: str) -> int | None:
    """Rank 1 returns at once. Rank 0 waits until rank 1's id is free, has another process take
    it, and returns that process's id: the launcher then stops the job as usual."""
    with open(os.path.join(record_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    if rank != 0:
        return None
    path = os.path.join(record_dir, "rank1.pid")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        text = open(path).read().strip() if os.path.exists(path) else ""
        if text and _gone(int(text)):
            return take_pid(int(text))
        time.sleep(0.01)
    raise TimeoutError("rank 1 did not end")


def join_and_leave(rank: int, world_size: int) -> int:
    """Join the group and leave it at once, with no collective: the rank that is done first must
    not break a peer that is still connecting (gloo connects every pair inside
    init_process_group)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.destroy_process_group()
    return rank


@dataclass
class Tally:
    """What a stress run counted."""

    launches: int = 0
    failures: list[str] = field(default_factory=list)  # one line per failed launch
    taken: int = 0  # finished ranks' ids given to a process of "another job"
    takers_stopped: list[int] = field(default_factory=list)  # of those, stopped by a launcher
    ids_churned: int = 0  # process ids used up by short-lived threads meanwhile (pid_max is 32768 here)


def _busy_loops(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _churn_ids(stop: threading.Event, counter: list[int]) -> None:
    """Use up process ids as a busy machine does (each thread takes one): thousands a second,
    so that they wrap around pid_max (32768 here) within seconds."""
    while not stop.is_set():
        for _ in range(100):
            threading.Thread(target=int).start()
        counter[0] += 100
        time.sleep(0.01)


def _launch_loop(kind: str, end: float, tally: Tally, lock: threading.Lock, tmp: str) -> None:
    from ddp_lib import launch
    from ddp_lib.launch._processes import pid_alive
    from ddp_lib.workers.ring import ring_check

    while time.monotonic() < end:
        record_dir = tempfile.mkdtemp(dir=tmp)
        try:
            if kind == "take":
                taker = launch.run_ranks(rank_one_pid_taken, 2, (record_dir,), show_output=False, timeout=120)[0]
            elif kind == "leave":
                launch.run_ranks(join_and_leave, 5, show_output=False, timeout=120)
                taker = None
            else:
                launch.run_ranks(ring_check, 3, (1000, 0), show_output=False, timeout=120)
                taker = None
        except Exception as exc:  # counted, not raised: the run goes on and reports every failure
            with lock:
                tally.launches += 1
                tally.failures.append(f"{kind}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        stopped = False
        if taker is not None:
            time.sleep(0.3)  # a signal sent by the launcher's last act takes a moment to end it
            stopped = not pid_alive(taker)
            try:
                os.kill(taker, 9)  # ours: started above, outside any launcher's tree, never reaped by it
            except ProcessLookupError:
                pass
        with lock:
            tally.launches += 1
            if taker is not None:
                tally.taken += 1
                if stopped:
                    tally.takers_stopped.append(taker)


def stress(seconds: float, tmp: str) -> Tally:
    """Launch jobs from two threads for ``seconds`` while the machine is kept busy: a busy loop
    per core, process ids used up fast enough to wrap around, and (where ids can be chosen)
    each finished rank's id given to a process leading its own group, as another job's rank.
    One thread runs a ring all-reduce on 3 ranks (the ranks must meet), one a job of 5 ranks that
    join and leave with no collective (none may leave while a peer is still connecting), the
    third the id-taking job on 2 ranks (or the ring job where ids cannot be chosen)."""
    from ddp_lib import launch
    from ddp_lib.workers.ring import ring_check

    launch.run_ranks(ring_check, 2, show_output=False)  # the forkserver started (torch imported) before the clock
    tally, lock, stop, churned = Tally(), threading.Lock(), threading.Event(), [0]
    loops = _busy_loops(os.cpu_count() or 1)
    churn = threading.Thread(target=_churn_ids, args=(stop, churned), daemon=True)
    churn.start()
    end = time.monotonic() + seconds
    kinds = ("ring", "leave", "take" if can_choose_pids() else "ring")
    threads = [threading.Thread(target=_launch_loop, args=(kind, end, tally, lock, tmp)) for kind in kinds]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        churn.join()
        for loop in loops:
            loop.kill()
            loop.wait()
    tally.ids_churned = churned[0]
    return tally


GLOO_PEER_GONE = ("Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
                  "Connection closed by peer [127.0.0.1]:41234")


def peer_failure_then_own(rank: int, world_size: int, how: str) -> None:
    """Rank 0 fails at once as gloo reports a peer that went away; rank 1 fails 0.3 s later for
    a reason of its own (``how``: "timeout" raises a TimeoutError whose words look like gloo's,
    "sigterm" is killed by SIGTERM from another process, as by another job's stale clean-up);
    the others wait to be stopped."""
    if rank == 0:
        import torch.distributed as dist

        raise dist.DistBackendError(GLOO_PEER_GONE)  # as torch raises a collective's broken connection
    if rank == 1:
        time.sleep(0.3)
        if how == "timeout":
            raise TimeoutError("Timed out waiting for the data files to appear")
        subprocess.run(["kill", "-TERM", str(os.getpid())])
    time.sleep(60)
