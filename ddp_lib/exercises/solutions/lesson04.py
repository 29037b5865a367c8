"""Lesson 04, exercise 1: average the gradients by hand, as DDP does. Exercise 2: accumulate gradients
over micro-batches with no_sync(). Exercise 3: find the parameters a backward would not reach."""

import contextlib

import torch.distributed as dist
from torch import nn


def average_gradients(model) -> None:
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:  # a parameter this backward did not reach
            # Safe only if it is unused on every rank: where other ranks have its gradient, they
            # all-reduce it and this rank does not, and the ranks' all-reduces no longer pair up
            # (a mismatch or a hang; lesson 04, section 6).
            continue
        # Scale first, then sum, as DDP does (its reducer multiplies by a float32 1/world_size while
        # copying into its buckets; torch's Python allreduce_hook divides, as here).
        p.grad /= world_size
        dist.all_reduce(p.grad)


def accumulate_step(ddp_model, optimizer, micro_batches) -> None:
    """One optimizer step over ``micro_batches``, a list of (x, y): one all-reduce, in the last backward."""
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with contextlib.nullcontext() if last else ddp_model.no_sync():  # the forward inside too
            loss = nn.functional.mse_loss(ddp_model(x), y) / k  # the sum of k means / k is a mean
            loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def unreached_parameters(output, parameters) -> list:
    """The parameters a backward from ``output`` would not reach: walk its graph from ``output.grad_fn``."""
    reached, stack, seen = set(), [output.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:  # None: an input that needs no gradient
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # an AccumulateGrad node: its .variable is a parameter
            reached.add(id(node.variable))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return [p for p in parameters if id(p) not in reached]
