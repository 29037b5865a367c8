"""DDP written from scratch, three ways, each a small class with the same shape:
AllReduceAfterBackward, PerParameterHooksDDP and BucketedOverlapDDP (and TorchDDP, torch's own,
with the same shape); ``make(way, module, **options)`` builds any of them by name.

They are defined in ``ddp_lib/workers/buckets.py``, next to the workers that check them against
torch's DDP, so that file and ``process_group.py`` are all a copy needs; this module keeps
``from ddp_lib import scratch_ddp`` working.
"""

from ddp_lib.workers.buckets import (
    WAYS,
    AllReduceAfterBackward,
    BucketedOverlapDDP,
    PerParameterHooksDDP,
    TorchDDP,
    make,
)

__all__ = ["WAYS", "AllReduceAfterBackward", "BucketedOverlapDDP", "PerParameterHooksDDP", "TorchDDP", "make"]
