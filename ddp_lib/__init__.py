"""Teaching PyTorch DistributedDataParallel: launcher, process groups, workers, plots, benchmarks.

    from ddp_lib import spawn, launch, process_group

``spawn`` and ``launch`` are those of ``ddp_lib.launch``; ``process_group`` is the context
manager of ``ddp_lib.process_group``. The modules ``ddp_lib.launch`` and
``ddp_lib.process_group`` keep their names and can be called as the function they are named
after, so ``import ddp_lib.process_group as pg; pg.setup()`` and ``with
ddp_lib.process_group(rank, world_size) as device:`` both work. Nothing heavy (torch) is
imported until one of them is used.
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"
__all__ = ["spawn", "launch", "process_group"]


class CallableModule(types.ModuleType):
    """A module that, called, calls its function of the same name (``ddp_lib.launch(...)`` is
    ``ddp_lib.launch.launch(...)``). A package attribute named like a submodule would otherwise
    hide the module: ``import ddp_lib.launch as m`` would give the function."""

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


def make_callable(module_name: str) -> None:
    """Let the module ``module_name`` be called as its function of the same name."""
    module = importlib.import_module(module_name)
    if not isinstance(module, CallableModule):
        module.__class__ = CallableModule


class _Package(types.ModuleType):
    """This package: ``ddp_lib.launch`` and ``ddp_lib.process_group`` are read as callable modules
    even when a plain ``import ddp_lib.process_group`` (a worker's) came before any use here."""

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if name in ("launch", "process_group") and type(value) is types.ModuleType:
            value.__class__ = CallableModule
        return value


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name == "spawn":
        from ddp_lib.launch import spawn

        return spawn
    if name in ("launch", "process_group"):
        make_callable(f"{__name__}.{name}")
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
