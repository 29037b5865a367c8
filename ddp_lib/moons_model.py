"""The training lessons' classifier and the batch norm that synchronises across ranks on any
device; defined in ``ddp_lib/workers/train.py`` (so that file runs on its own), named here too."""

from ddp_lib.workers.train import NORMS, AllReduceBatchNorm1d, MoonsNet, Norm, to_torch_sync_batchnorm

__all__ = ["NORMS", "AllReduceBatchNorm1d", "MoonsNet", "Norm", "to_torch_sync_batchnorm"]
