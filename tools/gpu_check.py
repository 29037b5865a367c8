"""Run lesson 03's GPU cases for real, on a machine with 2 or more CUDA GPUs: `make gpu-check`.

Each line says PASS or FAIL and what was seen; the exit code is 1 when a case did not behave as the
lesson says. On a machine with fewer than 2 GPUs it prints one line and exits 0: nothing to run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
CHECKPOINT = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "saved_on_cuda0.pt"


def _cases():
    """(name, function returning (passed, what was seen)) for every GPU claim of lesson 03."""
    from ddp_lib.demos import placement_demos
    from ddp_lib.errors import WorkerError
    from ddp_lib.launch import run_ranks
    from ddp_lib.workers import placement

    def error_of(fn, *args, **kwargs):
        try:
            return None, run_ranks(fn, 2, *args, **kwargs)
        except WorkerError as e:
            return f"{e.exc_type}: {e.message}", None

    def device_ids_move_inputs():
        seen = [r["input_seen_on"] for r in run_ranks(placement.input_placement, 2, kwargs=dict(pass_device_ids=True))]
        return seen == ["cuda:0", "cuda:1"], f"input arrived on {seen} with device_ids=[rank], made on the CPU"

    def no_device_ids_cpu_input_fails():
        error, _ = error_of(placement.input_placement, kwargs=dict(pass_device_ids=False, move_inputs=False))
        moved = [r["input_seen_on"] for r in run_ranks(placement.input_placement, 2,
                                                       kwargs=dict(pass_device_ids=False, move_inputs=True))]
        ok = error is not None and "same device" in error and moved == ["cuda:0", "cuda:1"]
        return ok, f"not moved: {error}; moved with .to(device): {moved}"

    def nccl_refuses_cpu_tensors():
        error, _ = error_of(placement.nccl_cpu_tensor, backend="nccl")
        return error is not None and "No backend type associated with device type cpu" in error, f"{error}"

    def without_set_device_fails():
        error, results = error_of(placement.without_set_device, backend="nccl", timeout=120)
        return error is not None, f"{error}" if error else f"no error: {results}"

    def with_set_device():
        results = run_ranks(placement.with_set_device, 2, backend="nccl")
        devices = [r["current_device"] for r in results]
        return devices == [0, 1], f"current device per rank {devices}"

    def set_device_after_init():
        error, results = error_of(placement.set_device_after_init, backend="nccl", timeout=120)
        ok = results is not None and [r["current_device"] for r in results] == [0, 1]
        return ok, error or f"current device per rank {[r['current_device'] for r in results]}"

    def bound_device_id():
        seen = {}
        for use in (False, True):
            seen[use] = [r["bound_device_id"] for r in run_ranks(placement_demos.bound_device, 2,
                                                            kwargs=dict(use_device_id=use), backend="nccl")]
        ok = seen[False] == [None, None] and seen[True] == ["cuda:0", "cuda:1"]
        return ok, f"without device_id {seen[False]}, with device_id {seen[True]}"

    def map_location_per_rank():
        with tempfile.TemporaryDirectory() as folder:
            results = run_ranks(placement.checkpoint_devices, 2, (os.path.join(folder, "checkpoint.pt"),))
        plain = [r["loaded_without_map_location"] for r in results]
        mapped = [r["loaded_with_map_location"] for r in results]
        ok = plain == ["cuda:0", "cuda:0"] and mapped == ["cuda:0", "cuda:1"]
        return ok, f"without map_location {plain}, with map_location=device {mapped}"

    def committed_checkpoint_loads_on_cuda0():
        seen = placement_demos.load_and_report(str(CHECKPOINT))
        return seen == "loaded; tensors on cuda:0", seen

    return [(f.__name__, f) for f in (device_ids_move_inputs, no_device_ids_cpu_input_fails, nccl_refuses_cpu_tensors,
                                      without_set_device_fails, with_set_device, set_device_after_init,
                                      bound_device_id, map_location_per_rank, committed_checkpoint_loads_on_cuda0)]


def main() -> int:
    if GPUS < 2:
        print(f"gpu-check: {GPUS} CUDA GPU(s) here, lesson 03's GPU cases need 2: nothing to run")
        return 0
    failed = 0
    for name, case in _cases():
        try:
            passed, seen = case()
        except Exception as e:  # a case that breaks is a failed case; go on with the others
            passed, seen = False, f"{type(e).__name__}: {e}"
        failed += not passed
        print(f"{'PASS' if passed else 'FAIL'} {name}: {seen}", flush=True)
    print(f"gpu-check: {failed} of {len(_cases())} cases did not behave as lesson 03 says" if failed
          else "gpu-check: every case behaved as lesson 03 says")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
