"""Workers for tests/test_plain_train.py: plain_train's evaluate on real ranks whose batch norm
buffers differ. Ranks import this module by name (see launcher_workers.py)."""

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

from ddp_lib.demos.plain_train import evaluate
from ddp_lib.process_group import process_group


def _model_with_batch_norm(rank: int) -> nn.Module:
    """The same weights on every rank, and running statistics of this rank's own, as after DDP training."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    model[1].running_mean += rank
    return model


def evaluate_drifted_buffers(rank: int, world_size: int) -> dict:
    """evaluate() on a model whose buffers differ by rank. Returns {"rank", "accuracy", "rank0_accuracy" (of
    rank 0's model on every sample, computed here alone), "mixed_accuracy" (each rank's own model on its shard,
    summed: evaluate without the broadcast), "buffers_are_rank0s"}."""
    with process_group(rank, world_size):
        g = torch.Generator().manual_seed(1)
        dataset = TensorDataset(torch.randn(41, 2, generator=g), torch.randint(0, 2, (41,), generator=g))
        x, y = dataset.tensors
        model, rank0_model = _model_with_batch_norm(rank), _model_with_batch_norm(0).eval()
        with torch.no_grad():
            rank0_accuracy = (rank0_model(x).argmax(1) == y).double().mean().item()
            shard = slice(rank, None, world_size)
            counts = torch.tensor([(model.eval()(x[shard]).argmax(1) == y[shard]).sum().item(), len(y[shard])],
                                  dtype=torch.float64)
        dist.all_reduce(counts)
        model.train()
        accuracy = evaluate(model, dataset, rank, world_size)
        same = all(torch.equal(a, b) for a, b in zip(model.buffers(), rank0_model.buffers()))
        return {"rank": rank, "accuracy": accuracy, "rank0_accuracy": rank0_accuracy,
                "mixed_accuracy": (counts[0] / counts[1]).item(), "buffers_are_rank0s": same}
