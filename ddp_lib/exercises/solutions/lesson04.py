"""Lesson 04, exercise 1: average the gradients by hand, as DDP does. Exercise 2: find the parameters
a backward would not reach."""

import torch.distributed as dist


def average_gradients(model) -> None:
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:  # a parameter this backward did not reach
            # Safe only if it is unused on every rank: where other ranks have its gradient, they
            # all-reduce it and this rank does not, and the ranks' all-reduces no longer pair up
            # (a mismatch or a hang; lesson 04, "Deeper: a parameter unused on some ranks only").
            continue
        # Scale first, then sum, as DDP does (its reducer multiplies by a float32 1/world_size while
        # copying into its buckets; torch's Python allreduce_hook divides, as here).
        p.grad /= world_size
        dist.all_reduce(p.grad)


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
