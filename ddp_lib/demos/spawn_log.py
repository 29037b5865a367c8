"""Lesson 00: the warnings torch's ``mp.spawn`` logs, such as "Terminating process ... via signal
SIGTERM", collected without the process id and the time, which change on every run."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
from collections.abc import Iterator

SPAWN_LOGGER = "torch.multiprocessing.spawn"


@contextlib.contextmanager
def torch_spawn_warnings() -> Iterator[list[str]]:
    """Keep what torch's launcher logs during the block off the screen. The list it yields is
    filled when the block ends, one message per record, with each process id written as "PID"."""
    log = logging.getLogger(SPAWN_LOGGER)
    buffer = logging.handlers.BufferingHandler(capacity=100)
    propagate = log.propagate
    log.addHandler(buffer)
    log.propagate = False
    messages: list[str] = []
    try:
        yield messages
    finally:
        log.removeHandler(buffer)
        log.propagate = propagate
        messages.extend(str(record.msg).replace("%s", "PID") for record in buffer.buffer)
