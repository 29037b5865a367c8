"""Lesson 03's two verdicts read from the installed torch's source: which tests DDP's constructor makes
on ``device_ids`` (none compares the index with the module's device), and whether
``torch.distributed`` ever calls ``set_device`` (it does not, so ``init_process_group`` cannot)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import torch.distributed.distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel


def device_ids_tests() -> tuple[list[str], bool]:
    """The conditions of the ``if`` statements in ``DistributedDataParallel.__init__`` that read
    ``device_ids``, and whether any of them also reads the module's device (``self.device``, a
    parameter's ``.device``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(DistributedDataParallel.__init__)))
    tests = [ast.unparse(node.test) for node in ast.walk(tree)
             if isinstance(node, ast.If) and "device_ids" in ast.unparse(node.test)]
    reads_module_device = any(("self.device " in t + " " or "p.device" in t or "_module_parameters" in t)
                              for t in tests)
    return tests, reads_module_device


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
