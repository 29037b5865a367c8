"""The small models the lessons train, all in one place: quick on a laptop CPU, the same code on a GPU.

Each is defined next to the workers that use it, so that a worker module and
``process_group.py`` are all a copy into another project needs: the classic example's
``ToyModel`` and lesson 04's MLP in ``process_group.py`` (several lessons use them),
``MoonsNet`` in ``workers/train.py``, ``TwoHeads`` in ``workers/gradients.py``, lesson 09's
``LoopNet`` in ``workers/training_loop.py`` and ``DeepNet`` in ``workers/compiled.py``.
"""

from ddp_lib.process_group import WIDTHS, ToyModel, make_mlp, param_checksum
from ddp_lib.workers.compiled import DeepNet
from ddp_lib.workers.gradients import TwoHeads
from ddp_lib.workers.train import NORMS, AllReduceBatchNorm1d, MoonsNet, Norm, to_torch_sync_batchnorm
from ddp_lib.workers.training_loop import LoopNet

__all__ = ["NORMS", "WIDTHS", "AllReduceBatchNorm1d", "DeepNet", "LoopNet", "MoonsNet", "Norm", "ToyModel",
           "TwoHeads", "make_mlp", "param_checksum", "to_torch_sync_batchnorm"]
