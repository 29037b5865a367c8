"""The forkserver that ddp_lib's launcher starts ranks from, with torch imported once in it.

Importing this module does not import torch, so a caller can start the server first and import
torch itself while the server does the same.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver

# The modules the forkserver imports once; each rank forked from it starts with them loaded.
# (DDP imports torch._dynamo on construction: 2-3 s per rank if not preloaded.) ddp_lib itself
# is not preloaded: ranks import it fresh, so edits take effect.
FORKSERVER_PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo"]


def start_forkserver() -> None:
    """Start this process's forkserver now, with ``FORKSERVER_PRELOAD``, and return at once.

    The server imports torch in the background; the first launch waits only for what is left of
    that. No effect if the server already runs (it keeps the preload it started with)."""
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)
    multiprocessing.forkserver.ensure_running()
