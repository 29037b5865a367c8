"""The DDP tutorial's ``setup()`` kept under torchrun (lesson 06): each rank sets its own
``MASTER_ADDR`` and ``MASTER_PORT=12355``, as ``mp.spawn``'s scripts do, then joins the group.

    torchrun --standalone --nproc-per-node 1 -m ddp_lib.demos.torchrun_own_port

torchrun's agent runs the ranks' store on a port it picks, and tells the ranks to connect to it
only (``TORCHELASTIC_USE_AGENT_STORE=True``): no rank starts a store, not even rank 0
(under ``mp.spawn``, rank 0 does). So every rank dials port 12355, where nothing listens, and
``init_process_group`` raises ``DistNetworkError``. One rank shows it. In torch 2.13 the rank's store
client tries again after a ``retrying`` warning, until a try ends past its deadline; each try can
last up to the group's timeout. The tutorial gives no timeout, so under gloo a rank would wait
30 minutes without a word, log that warning, and could wait about as long again; this one gives 1 s.
"""

from __future__ import annotations

import os
from datetime import timedelta

TIMEOUT_S = 1  # the lesson's; the tutorial's setup() gives none: 30 min under gloo, per try
# The tutorial's port. The tests set TUTORIAL_PORT to a free one, so that no other job on the machine
# that listens on 12355 (lesson 00 does, for a while) turns the timeout into a join.
TUTORIAL_PORT = os.environ.get("TUTORIAL_PORT", "12355")


def setup(rank: int, world_size: int) -> None:
    """The tutorial's ``setup()``, with a short timeout."""
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = TUTORIAL_PORT  # "12355", the tutorial's port
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=TIMEOUT_S))


def main() -> None:
    import torch.distributed as dist

    setup(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    dist.destroy_process_group()  # not reached under torchrun


def shown() -> str:
    """``setup()`` and ``main()`` as lesson 06 shows them: each from its ``def`` line to its group call,
    without the module's docstring, constants and ``__main__`` guard."""
    from ddp_lib.demos.source_lines import source_text

    return (source_text(setup, "def setup", "dist.init_process_group") + "\n\n"
            + source_text(main, "def main", "dist.destroy_process_group"))


if __name__ == "__main__":
    main()
