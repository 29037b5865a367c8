"""The files to copy to run each worker module outside ddp_lib, in another project.

Every module under ``ddp_lib/workers/`` that holds workers is here, and runs with the files of its
row only: ``process_group.py`` (joining the group, the device rule) and, where it needs them,
``shared.py`` (models, batches and tensor helpers that several lessons share) or another worker
module. All of them import only torch and the standard library (a worker imports ``ddp_lib.X``
when the package is there and the copy beside it when it is not). The README's copy table is
written from this map by ``tools/copy_table.py``, and ``tests/test_copy_workers.py`` copies each
entry where ddp_lib cannot be imported and runs its workers under ``torch.multiprocessing.spawn``
and ``torchrun``.
"""

from __future__ import annotations

# Worker module (under ddp_lib/workers/) -> the files to copy, the module itself first.
FILES_TO_COPY: dict[str, tuple[str, ...]] = {
    "basic": ("basic.py", "process_group.py", "shared.py"),
    "faulty_ranks": ("faulty_ranks.py", "process_group.py"),
    "collectives": ("collectives.py", "process_group.py", "shared.py"),
    "collective_extras": ("collective_extras.py", "process_group.py", "shared.py"),
    "point_to_point": ("point_to_point.py", "process_group.py", "shared.py"),
    "ring": ("ring.py", "process_group.py", "shared.py"),
    "placement": ("placement.py", "process_group.py", "shared.py"),
    "gradients": ("gradients.py", "process_group.py", "shared.py"),
    "buckets": ("buckets.py", "process_group.py", "shared.py"),
    "spawning": ("spawning.py", "process_group.py"),
    "train": ("train.py", "process_group.py", "shared.py"),
    "template": ("template.py",),
    "train_pitfalls": ("train_pitfalls.py", "train.py", "process_group.py", "shared.py"),
    "torchrun_env": ("torchrun_env.py", "process_group.py"),
    "torchrun_failure": ("torchrun_failure.py",),
    "failure_lab": ("failure_lab.py", "process_group.py"),
    "training_loop": ("training_loop.py", "process_group.py", "shared.py"),
    "compiled": ("compiled.py", "process_group.py"),
    "beyond_ddp": ("beyond_ddp.py", "process_group.py"),
}

# Packages a copy needs beyond torch for one option only, imported inside the function that uses it:
# module -> {package: the option that needs it}. None today: the tqdm bar of ``run train --progress``
# is the lesson's (ddp_lib/demos/training_runs.py), not train.py's.
OPTIONAL_PACKAGES: dict[str, dict[str, str]] = {}

