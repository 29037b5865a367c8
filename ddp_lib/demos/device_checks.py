"""Lesson 03's verdicts about the installed torch: which tests DDP's constructor makes on
``device_ids`` (none reads an entry, so none compares the index with the module's device), where
DDP uses ``self.output_device`` (only while it is built), and whether the Python module that defines
``init_process_group`` changes the current device (it does not; its C++ code is not searched)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import torch.distributed.distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel


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


def output_device_uses() -> list[tuple[str, str, str]]:
    """Every use of ``self.output_device`` in the installed ``torch/nn/parallel/distributed.py``:
    ``(function, "sets" or "reads", the source line)``, found with ``ast`` in the file itself. A
    use inside ``forward`` (or a function it calls) would show as a line in such a function."""
    import torch.nn.parallel.distributed as ddp_module

    source = inspect.getsource(ddp_module)
    lines = source.splitlines()
    functions = [node for node in ast.walk(ast.parse(source))
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def enclosing(lineno: int) -> str:
        inside = [f for f in functions if f.lineno <= lineno <= f.end_lineno]
        return max(inside, key=lambda f: f.lineno).name if inside else "(module)"

    uses = sorted({(node.lineno, isinstance(node.ctx, ast.Store)) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Attribute) and node.attr == "output_device"
                  and isinstance(node.value, ast.Name) and node.value.id == "self"})
    return [(enclosing(n), "sets" if store else "reads", lines[n - 1].strip()) for n, store in uses]


# The calls that change the current device: torch.cuda.set_device, torch.accelerator.set_device_index,
# and the context managers torch.cuda.device(i) and torch.accelerator.device_index(i).
_DEVICE_SETTERS = ("set_device", "set_device_index", "cuda.device", "accelerator.device_index")


def set_device_calls() -> list[str]:
    """Every call that changes the current device (``set_device``, ``set_device_index``,
    ``torch.cuda.device(...)``, ``torch.accelerator.device_index(...)``) in
    ``torch.distributed.distributed_c10d``, the module that defines ``init_process_group``, as
    ``function: call`` (the docstrings only mention them)."""
    tree = ast.parse(inspect.getsource(c10d))
    calls = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    name = ast.unparse(node.func)
                    if any(name == setter or name.endswith("." + setter) for setter in _DEVICE_SETTERS):
                        calls.append(f"{function.name}: {ast.unparse(node)}")
    return calls
