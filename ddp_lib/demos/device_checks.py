"""Lesson 03's verdicts about the installed torch: which tests DDP's constructor makes on
``device_ids`` (none reads an entry, so none compares the index with the module's device), how often
DDP reads ``output_device`` (only while it is built), and whether the Python module that defines
``init_process_group`` calls ``set_device`` (it does not; its C++ code is not searched)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import torch.distributed.distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel

from ddp_lib.process_group import teardown


def device_ids_tests() -> tuple[list[str], bool]:
    """The conditions of the ``if`` statements in ``DistributedDataParallel.__init__`` that read
    ``device_ids``, and whether any of them reads an entry of ``device_ids`` (``device_ids[0]``,
    ``x in device_ids``): only such a test could compare the index ``i`` with the module's device.
    The conditions may read the module's device *type*; that does not check the index."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(DistributedDataParallel.__init__)))
    conditions = [node.test for node in ast.walk(tree)
                  if isinstance(node, ast.If) and "device_ids" in ast.unparse(node.test)]

    def is_device_ids(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == "device_ids"

    def reads_an_entry(condition: ast.AST) -> bool:
        for node in ast.walk(condition):
            if isinstance(node, ast.Subscript) and is_device_ids(node.value):
                return True
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                    and any(is_device_ids(c) for c in node.comparators):
                return True
            if isinstance(node, ast.comprehension) and is_device_ids(node.iter):
                return True
        return False

    return [ast.unparse(c) for c in conditions], any(reads_an_entry(c) for c in conditions)


def output_device_reads(steps: int = 3) -> tuple[int, int]:
    """Count the reads of ``ddp_model.output_device`` on a CPU ``nn.Linear`` wrapped in DDP (a
    one-process gloo group, in-memory store): while DDP is built, and during ``steps`` forward and
    backward passes. Returns ``(reads while built, reads in the passes)``."""
    import torch
    import torch.distributed as dist

    class CountingDDP(DistributedDataParallel):
        reads = 0

        @property
        def output_device(self):
            CountingDDP.reads += 1
            return self.__dict__["counted_output_device"]

        @output_device.setter
        def output_device(self, value):
            self.__dict__["counted_output_device"] = value

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ddp_model = CountingDDP(torch.nn.Linear(2, 2))
        built = CountingDDP.reads
        for _ in range(steps):
            ddp_model(torch.randn(4, 2)).sum().backward()
        return built, CountingDDP.reads - built
    finally:
        teardown()  # not destroy_process_group alone: the pause there avoids gloo's shutdown deadlock


def set_device_calls() -> list[str]:
    """Every call of a function named ``set_device`` in ``torch.distributed.distributed_c10d``, the module
    that defines ``init_process_group``, as ``function: call`` (the docstrings only mention it)."""
    tree = ast.parse(inspect.getsource(c10d))
    calls = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                    if name == "set_device":
                        calls.append(f"{function.name}: {ast.unparse(node)}")
    return calls
