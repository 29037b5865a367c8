"""Count hangs at the end of a DDP worker on gloo, one way of ending at a time.

A gloo process group's destructor joins gloo's worker threads. One of them may still be releasing
the last finished work of a backward pass, and that needs the GIL; if the destructor runs on a
thread that holds the GIL (as when DDP's reducer drops the group's last reference), the two wait
for each other forever. This script runs tiny DDP jobs (2 ranks, CPU, gloo, a 16-16-4 model,
3 backward passes) many times, each ending one way, and counts how many ended, hung, or failed
otherwise. Run it again after a torch upgrade, and update the counts quoted in
``ddp_lib/process_group.py`` (``teardown``), ``ddp_lib/launch/_child.py``, ``docs/launcher.md``
and ``ddp_lib/demos/recorded/gloo_shutdown.json`` (lesson 02's table).

    .venv/bin/python tools/gloo_shutdown_check.py                  # every ending, 200 runs or 3 minutes each
    .venv/bin/python tools/gloo_shutdown_check.py --runs 50 --minutes 1 returned teardown
    .venv/bin/python tools/gloo_shutdown_check.py --unkept both cleanup-returned   # without the launcher's guard

Endings (the last step of the worker, right after its last backward pass):

- ``destroy-return`` (plain processes): ``dist.destroy_process_group()``, then the DDP
  model freed, as when its function returns (its reducer holds the last reference to the group);
- ``barrier-destroy-return`` (plain processes): ``dist.barrier()``, then the same as
  ``destroy-return``: the ending of lesson 02's script, a collective after the last backward;
- ``return-destroy`` (plain processes): the model freed first, then ``dist.destroy_process_group()``
  drops the last reference to the group;
- ``teardown-return`` (plain processes, as under torchrun): ``ddp_lib.process_group.teardown()``,
  then the model freed; each run joins through ``setup()``, which frees what the last one left;
- ``returned`` (``ddp_lib.run_ranks``): return with the DDP model a local, the group never
  destroyed;
- ``cleanup-returned`` (``ddp_lib.run_ranks``): the tutorial's ``cleanup()``
  (``dist.destroy_process_group()``) then return, DDP still holding the group;
- ``inner-cleanup`` (``ddp_lib.run_ranks``): the same inside a function the worker calls, so the
  model is freed before the worker returns;
- ``teardown`` (``ddp_lib.run_ranks``): ``ddp_lib.process_group.teardown()`` then return.

``--unkept`` first drops, in each rank, what the launcher's child keeps alive against this
deadlock: ``frame`` (the worker's frame), ``groups`` (every process group) or ``both``, so the
launcher's endings run as they would without that guard.

The plain processes run several runs each (a new group in a new file store every run) and leave
with ``os._exit``, so an abort at interpreter exit (torch issue #190489, another bug) is not
counted here. Only the ending is timed: a run whose ending takes longer than ``--hang-seconds``
counts as a hang (faulthandler writes every thread's stack and ends the process; the first such
stacks are printed, on stderr).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import subprocess
import sys
import tempfile
import time

ENDINGS = ("destroy-return", "barrier-destroy-return", "return-destroy", "teardown-return", "returned",
           "cleanup-returned", "inner-cleanup", "teardown")
PLAIN_ENDINGS = ("destroy-return", "barrier-destroy-return", "return-destroy", "teardown-return")
RUNS_PER_PLAIN_JOB = 10
BACKWARD_PASSES = 3


def _train(rank: int):
    """A DDP model on this rank's group after BACKWARD_PASSES backward passes."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)))
    for step in range(BACKWARD_PASSES):
        model(torch.randn(8, 16) + rank + step).sum().backward()
    return model


# -- the launcher's endings (ddp_lib.run_ranks) -----------------------------------------------


def _drop_launcher_references(what: str) -> None:
    """Undo what the launcher's child keeps alive, if it keeps anything: the worker's frame
    (``kept`` of ``_call_keeping_locals``) and every process group (the list that torch's group
    registry fills, ``_keep_process_groups``), so the worker's locals are freed as it returns."""
    from torch.distributed import distributed_c10d

    child = sys.modules.get("ddp_lib.launch._child")
    if what in ("groups", "both"):
        groups = getattr(distributed_c10d._pg_map, "kept", None)  # ddp_lib.launch._child._RegistryThatKeeps
        if isinstance(groups, list):
            groups.clear()
            distributed_c10d._pg_map = dict(distributed_c10d._pg_map)  # groups created from here on: not kept
    if what in ("frame", "both"):
        frame = sys._getframe(1)
        while frame is not None:
            held = frame.f_locals.get("kept") if frame.f_code.co_filename == getattr(child, "__file__", None) else None
            if isinstance(held, list):
                held.clear()
            frame = frame.f_back


def launcher_worker(rank: int, world_size: int, ending: str, hang_s: float, unkept: str) -> str:
    """One rank of a run_ranks job that ends as ``ending`` says; returns "ok" if it got out."""
    import torch
    import torch.distributed as dist

    from ddp_lib.process_group import setup, teardown

    torch.set_num_threads(1)
    setup(rank, world_size)
    if unkept:
        _drop_launcher_references(unkept)
    if ending == "inner-cleanup":
        _train_and_clean_up(rank, hang_s)
        return "ok"
    model = _train(rank)
    # A rank still inside its worker after hang_s writes its threads' stacks and ends (code 1).
    faulthandler.dump_traceback_later(hang_s, exit=True)
    if ending == "cleanup-returned":
        dist.destroy_process_group()
    elif ending == "teardown":
        teardown()
    return "ok" if model is not None else "no model"  # the model is freed as this returns


def _train_and_clean_up(rank: int, hang_s: float) -> None:
    """The tutorial's cleanup() inside a function the worker calls: the model dies as it returns."""
    import torch.distributed as dist

    model = _train(rank)
    faulthandler.dump_traceback_later(hang_s, exit=True)
    dist.destroy_process_group()
    del model


def run_launcher(ending: str, runs: int, deadline: float, hang_s: float, unkept: str) -> dict:
    from ddp_lib.errors import LaunchTimeout, WorkerError
    from ddp_lib.launch import run_ranks

    counts = {"ended": 0, "hung": 0, "failed": 0}
    first_hang = ""
    for _ in range(runs):
        if time.monotonic() > deadline:
            break
        try:
            run_ranks(launcher_worker, 2, (ending, hang_s, unkept), show_output=False, timeout=hang_s * 3)
            counts["ended"] += 1
        except LaunchTimeout as exc:
            counts["hung"] += 1
            first_hang = first_hang or str(exc.__cause__ or exc)
        except WorkerError as exc:
            text = "\n".join(err for _, err in exc.outputs.values())  # each rank's (stdout, stderr)
            if "Fatal Python error: Timeout" in text or "Timeout (0:" in text:
                counts["hung"] += 1
                first_hang = first_hang or text
            else:
                counts["failed"] += 1
                print(f"  {ending}: {exc}", file=sys.stderr)
    if first_hang:
        print(f"--- {ending}: stacks of the first hang ---\n{first_hang[-6000:]}", file=sys.stderr)
    return counts


# -- the plain processes' endings -------------------------------------------------------------


def plain_rank(rank: int, world_size: int, ending: str, store_dir: str, runs: int, hang_s: float) -> None:
    """One rank of a plain job: ``runs`` runs, each a new group that ends as ``ending`` says."""
    import torch
    import torch.distributed as dist

    from ddp_lib.process_group import setup, teardown

    torch.set_num_threads(1)
    for run in range(runs):
        setup(rank, world_size, backend="gloo", init_method=f"file://{store_dir}/run{run}")
        model = _train(rank)
        faulthandler.dump_traceback_later(hang_s, exit=True)  # only the ending is timed
        if ending == "teardown-return":
            teardown()
            del model
        elif ending in ("destroy-return", "barrier-destroy-return"):
            if ending == "barrier-destroy-return":
                dist.barrier()  # a collective after the last backward, as lesson 02's script ends
            dist.destroy_process_group()
            del model  # as a return would: the reducer drops the last reference to the group
        else:  # "return-destroy"
            del model  # the group is still registered, so this frees the model only
            dist.destroy_process_group()  # drops the last reference to the group
        faulthandler.cancel_dump_traceback_later()
        print("ended", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # not an interpreter exit: that has its own abort (#190489), not counted here


def run_plain(ending: str, runs: int, deadline: float, hang_s: float, unkept: str) -> dict:
    counts = {"ended": 0, "hung": 0, "failed": 0}
    first_hang = ""
    done = 0
    while done < runs and time.monotonic() < deadline:
        batch = min(RUNS_PER_PLAIN_JOB, runs - done)
        with tempfile.TemporaryDirectory() as store_dir:
            procs = [subprocess.Popen([sys.executable, __file__, "--plain-rank", str(rank), ending, store_dir,
                                       str(batch), str(hang_s)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for rank in range(2)]
            stop_at = time.monotonic() + hang_s * (batch + 3)
            while any(p.poll() is None for p in procs) and time.monotonic() < stop_at:
                if any(p.poll() not in (None, 0) for p in procs):  # a rank hung and ended: its peer waits
                    time.sleep(2)
                    break
                time.sleep(0.05)
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            outs = [proc.communicate() for proc in procs]
        ended = min(out.count("ended") for out, _ in outs)
        counts["ended"] += ended
        if ended < batch:
            stderr = "\n".join(err for _, err in outs)
            if "Timeout (0:" in stderr:
                counts["hung"] += 1
                first_hang = first_hang or stderr
            else:
                counts["failed"] += 1
                print(f"  {ending}: exit codes {[p.returncode for p in procs]}\n{stderr[-3000:]}", file=sys.stderr)
        done += ended + (ended < batch)
    if first_hang:
        print(f"--- {ending}: stacks of the first hang ---\n{first_hang[-6000:]}", file=sys.stderr)
    return counts


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-rank":
        rank, ending, store_dir, runs, hang_s = sys.argv[2:7]
        plain_rank(int(rank), 2, ending, store_dir, int(runs), float(hang_s))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("endings", nargs="*", choices=[*ENDINGS, []], help="default: every ending")
    parser.add_argument("--runs", type=int, default=200, help="runs per ending (default 200)")
    parser.add_argument("--minutes", type=float, default=3.0, help="at most this long per ending (default 3)")
    parser.add_argument("--hang-seconds", type=float, default=20.0,
                        help="a run not ended after this long counts as a hang (default 20)")
    parser.add_argument("--unkept", choices=["frame", "groups", "both"], default="",
                        help="launcher endings: first drop what the launcher's child keeps alive")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import torch

    print(f"torch {torch.__version__}, 2 ranks, gloo, {BACKWARD_PASSES} backward passes per run")
    for ending in args.endings or ENDINGS:
        start = time.monotonic()
        deadline = start + args.minutes * 60
        run = run_plain if ending in PLAIN_ENDINGS else run_launcher
        counts = run(ending, args.runs, deadline, args.hang_seconds, args.unkept)
        if ending not in PLAIN_ENDINGS and args.unkept:
            ending += f" (unkept: {args.unkept})"
        total = sum(counts.values())
        print(f"{ending:30} runs {total:4}  ended {counts['ended']:4}  hung {counts['hung']:3}  "
              f"failed {counts['failed']:3}  ({time.monotonic() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
