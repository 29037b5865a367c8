"""The forkserver that ddp_lib's launcher starts ranks from, with torch imported once in it.

Importing this module does not import torch, so a caller can start the server first and import
torch itself while the server does the same.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading
from collections.abc import Callable

# The modules the forkserver imports once; each rank forked from it starts with them loaded.
# (DDP imports torch._dynamo on construction: 2-3 s per rank if not preloaded.) ddp_lib itself
# is not preloaded: ranks import it fresh, so edits take effect.
FORKSERVER_PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo"]

# Run when a kernel is asked to shut down, before its forkserver ends (end_with_the_kernel):
# what stops ranks that are still up, which hold the resource tracker's pipe open.
_first_at_kernel_shutdown: list[Callable[[], None]] = []


def start_forkserver() -> None:
    """Start this process's forkserver now, with ``FORKSERVER_PRELOAD``, and return at once.

    The server imports torch in the background; the first launch waits only for what is left of
    that. No effect if the server already runs (it keeps the preload it started with)."""
    end_with_the_kernel()
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)
    multiprocessing.forkserver.ensure_running()


def _nothing() -> None:
    """A forkserver child that does nothing (wait_for_forkserver)."""


def wait_for_forkserver() -> None:
    """Return once this process's forkserver has imported ``FORKSERVER_PRELOAD``: start one
    process from it that does nothing, and wait for that process to end. The server forks a child
    only after its imports. Starts the server first if it is not running."""
    start_forkserver()
    child = multiprocessing.get_context("forkserver").Process(target=_nothing)
    child.start()
    child.join()


def end_with_the_kernel() -> None:
    """In a Jupyter kernel, have its shutdown end the forkserver and multiprocessing's resource
    tracker first, and reap both; nothing elsewhere. Called before the forkserver starts.

    ipykernel, asked to shut down, signals its children (SIGTERM, then SIGKILL) and waits until it
    has none before it exits, for up to 29 s: it counts a child that has ended but was not reaped,
    and the resource tracker ignores SIGTERM (it ends when every holder of its pipe has closed it).
    Jupyter stops waiting first (jupyter_client: after 2.5 s by default) and ends the kernel with
    SIGTERM, so its atexit handlers (a TemporaryDirectory's removal among them) never ran."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    do_shutdown = getattr(getattr(shell, "kernel", None), "do_shutdown", None)
    if do_shutdown is None or getattr(do_shutdown, "ends_multiprocessing_helpers", False):
        return

    def end_helpers_then_shut_down(*args, **kwargs):
        for stop in list(_first_at_kernel_shutdown):
            with contextlib.suppress(Exception):  # never in the way of the kernel's own shutdown
                stop()
        with contextlib.suppress(Exception):
            _end_multiprocessing_helpers()
        return do_shutdown(*args, **kwargs)

    end_helpers_then_shut_down.ends_multiprocessing_helpers = True
    shell.kernel.do_shutdown = end_helpers_then_shut_down


def register_at_kernel_shutdown(stop: Callable[[], None]) -> None:
    """Have a kernel's shutdown call ``stop()`` before it ends the forkserver (as atexit would
    call it, too late: see :func:`end_with_the_kernel`); for ranks that stay up between cells."""
    end_with_the_kernel()
    _first_at_kernel_shutdown.append(stop)


def unregister_at_kernel_shutdown(stop: Callable[[], None]) -> None:
    """Undo :func:`register_at_kernel_shutdown` (nothing if ``stop`` is not registered)."""
    with contextlib.suppress(ValueError):
        _first_at_kernel_shutdown.remove(stop)


def _end_multiprocessing_helpers() -> None:
    """Let go of this process's ends of the forkserver's and the resource tracker's pipes, so that
    each ends (the tracker once the server and every rank have too), and reap them in the
    background. Their file descriptors are pointed at /dev/null rather than closed: a later
    launch or registration then fails or goes nowhere instead of starting them again, and the
    numbers cannot be reused by another file while multiprocessing still holds them."""
    from multiprocessing import forkserver, resource_tracker

    server, tracker = forkserver._forkserver, resource_tracker._resource_tracker
    helpers = [(getattr(server, "_forkserver_alive_fd", None), getattr(server, "_forkserver_pid", None)),
               (getattr(tracker, "_fd", None), getattr(tracker, "_pid", None))]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd, pid in helpers:
            if fd is None or pid is None:  # never started here (or a child's inherited end)
                continue
            os.dup2(devnull, fd)  # the pipe's write end closes: end of file for the helper
            threading.Thread(target=_reap, args=(pid,), daemon=True).start()
    finally:
        os.close(devnull)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # already reaped by multiprocessing
        os.waitpid(pid, 0)
