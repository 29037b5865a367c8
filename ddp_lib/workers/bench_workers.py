"""The benchmarks' rank code moved to ``ddp_lib.bench.ranks``; these names keep working."""

from ddp_lib.bench.ranks import (
    DDP_BATCH,
    DDP_WIDTHS,
    allreduce_sweep,
    bucket_sweep,
    ddp_steps,
    plain_allreduce,
    timed_train,
)

__all__ = ["DDP_BATCH", "DDP_WIDTHS", "allreduce_sweep", "bucket_sweep", "ddp_steps", "plain_allreduce", "timed_train"]
