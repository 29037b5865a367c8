"""The forkserver, the process that starts each rank of a launch: started deaf to Ctrl-C, with a
notice in a notebook (its first start imports torch), and with the launcher's preload."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading

from ddp_lib.forkserver import FORKSERVER_PRELOAD, end_with_the_kernel
from ddp_lib.launch._processes import pid_alive

# Printed when a notebook kernel starts its forkserver: the first launch's cell would otherwise
# stay blank while the server imports torch. Fixed text, so that stored and fresh outputs match.
FORKSERVER_NOTICE = ("starting the forkserver, the process that starts each rank: "
                     "it imports torch once per kernel (a few seconds; up to 20 s on a busy machine)")


def _in_notebook_kernel() -> bool:
    """Whether this process is a Jupyter kernel (JupyterLab, nbclient, Colab), not a script, the
    command line or a terminal IPython. IPython is never imported here for the question."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return getattr(shell, "kernel", None) is not None


def _forkserver_running() -> bool:
    """Whether this process's forkserver has been started and has not exited (not reaped here:
    multiprocessing reaps it, and restarts it, in ensure_running)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if not hasattr(server, "_forkserver_pid"):
        return True  # internals of another Python version: say nothing rather than at every launch
    pid = server._forkserver_pid
    if pid is None:
        return False
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except (AttributeError, OSError):
        return pid_alive(pid)


def start_deaf_to_ctrl_c() -> None:
    """Start multiprocessing's forkserver (if it is not running) with SIGINT ignored.

    Jupyter's stop button sends SIGINT to the kernel's whole process group, the forkserver
    included; multiprocessing ignores SIGINT in the forkserver only once it has imported its
    preloaded modules, so a press during a kernel's first launch (torch being imported) killed
    it. An ignored signal stays ignored across exec, and Python then installs no handler."""
    from multiprocessing import forkserver

    # Only in a notebook: a kernel starts one forkserver for all its launches, while each command
    # line run starts its own, where the line would be noise printed every time.
    if _in_notebook_kernel() and not _forkserver_running():
        print(FORKSERVER_NOTICE, flush=True)
    end_with_the_kernel()
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()  # signal handlers can only be changed from the main thread
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


# Set on import, not at the first launch: the forkserver is one per process and keeps the
# preload it started with, so a raw mp.start_processes(..., "forkserver") run first would
# otherwise leave every later launch importing torch afresh.
if "forkserver" in multiprocessing.get_all_start_methods():
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)

