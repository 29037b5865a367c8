"""The files to copy to run each worker module outside ddp_lib, in another project.

Each module runs with at most one other file, ``process_group.py``; both import only torch and the
standard library (a worker imports ``ddp_lib.process_group`` when the package is there and the copy
beside it when it is not). The README's copy table is written from this map by
``tools/copy_table.py``, and ``tests/test_copy_workers.py`` copies each entry where ddp_lib cannot be
imported and runs its workers under ``torch.multiprocessing.spawn`` and ``torchrun``.
"""

from __future__ import annotations

# Worker module (under ddp_lib/workers/) -> the files to copy, the module itself first.
FILES_TO_COPY: dict[str, tuple[str, ...]] = {
    "basic": ("basic.py", "process_group.py"),
    "failures": ("failures.py", "process_group.py"),
    "collectives": ("collectives.py", "process_group.py"),
    "ring": ("ring.py", "process_group.py"),
    "placement": ("placement.py", "process_group.py"),
    "gradients": ("gradients.py", "process_group.py"),
    "buckets": ("buckets.py", "process_group.py"),
    "spawning": ("spawning.py", "process_group.py"),
    "train": ("train.py", "process_group.py"),
    "torchrun_env": ("torchrun_env.py", "process_group.py"),
}

# Packages a copy needs beyond torch for one option only, imported inside the function that uses it:
# module -> {package: the option that needs it}.
OPTIONAL_PACKAGES: dict[str, dict[str, str]] = {
    "train": {"tqdm": "progress=True"},
}
