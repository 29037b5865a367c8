"""Lesson 06's quick ending for the ranks it starts with torchrun, kept out of the scripts a learner copies.

Python imports a ``sitecustomize`` module from ``sys.path`` as it starts. Lesson 06 puts this folder
first on ``PYTHONPATH`` (:func:`ddp_lib.demos.torchrun_batch.skip_rank_teardown`), so every Python the
notebook starts finds this file. In a process that torchrun started as a rank (``LOCAL_RANK`` and
``TORCHELASTIC_RUN_ID`` set), it registers an ``atexit`` handler. Registered first, that handler runs
last, after every other ``atexit`` handler. It then ends the process with ``os._exit(0)``, skipping
the rest of Python's shutdown and its last garbage collection. There a gloo thread can, now and then,
abort a rank whose work is done (lesson 02, "Deeper: the rare abort at exit"; pytorch#190489).

Only a rank that ended normally is ended this way. An uncaught exception (``sys.last_value`` is set
before the handlers run) or ``sys.exit(N)`` with N not 0 keeps its usual ending and its exit code.
A ``raise SystemExit(N)`` written out, not through ``sys.exit``, is not seen: it would end with 0.
Any other Python (torchrun itself, the notebook's helpers) is left alone.
"""

import atexit
import os
import sys

if "LOCAL_RANK" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ:
    _requested = []  # what sys.exit was last asked for: None and 0 mean success
    _sys_exit = sys.exit

    def _exit(status=None):
        _requested[:] = [status]
        _sys_exit(status)

    def _leave_without_teardown():
        if getattr(sys, "last_value", None) is not None or (_requested and _requested[0] not in (None, 0)):
            return  # a failure: Python's usual ending, with its exit code
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        os._exit(0)

    sys.exit = _exit
    atexit.register(_leave_without_teardown)
