"""Checker for lesson 06b's exercise 4: mismatched ``--nnodes`` with three torchruns on one machine.

The learner writes down what the runs showed (or predicts it): the world size ``hello`` prints when the
torchruns start with ``--nnodes`` 2, 3, 3, and how the first torchrun ends in the order 3, 3, 2.
No torch is needed to check it.
"""

import re

from ddp_lib.exercises.checking import Report

# What the other torchruns of the order 3, 3, 2 may end with, by a race (docs/answers.md): the first closes
# the rendezvous on its way out, and it hosts the store, which ends with it. torchrun's last line for a lost
# store is RendezvousConnectionError, with DistNetworkError inside.
LATER_ERRORS = ("RendezvousClosedError", "DistNetworkError", "RendezvousConnectionError")
KNOWN_ERRORS = ("RendezvousTimeoutError", *LATER_ERRORS, "DistStoreError", "TimeoutError")
FORM = "check_three_nodes_reading(world_size=int, first_error='ErrorName')"


def _whole(value: object) -> int | None:
    """A whole number written as 2, 2.0 or "2" (None: not that)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number == int(number) and not isinstance(value, bool) else None


def _error_name(value: object) -> str | None:
    """The error's class name from an exception class, an exception, or a line of text that names it."""
    if isinstance(value, type) and issubclass(value, BaseException):
        return value.__name__
    if isinstance(value, BaseException):
        return type(value).__name__
    if isinstance(value, str):
        named = [name for name in KNOWN_ERRORS if re.search(rf"\b{name}\b", value)]
        if named:  # the first one the line names, as torchrun's last line names the outer error first
            return min(named, key=lambda name: re.search(rf"\b{name}\b", value).start())
        word = re.search(r"\b\w+Error\b", value)
        return word.group(0) if word else None
    return None


def check_three_nodes_reading(world_size: object = None, first_error: object = None) -> Report:
    """A report on exercise 4's reading, one line per part: ``hello``'s world size when the three torchruns
    start with ``--nnodes`` 2, 3, 3, and the error of the first torchrun in the order 3, 3, 2."""
    report = Report()
    if world_size is None and first_error is None:
        report.fail(f"write your reading: {FORM}")
        return report
    size = _whole(world_size)
    if size == 3:
        report.ok("2, 3, 3: the third torchrun's join makes 3 participants, its own count: hello prints a world "
                  "of 3 ranks, though the first torchrun said 2")
    elif size == 2:
        report.fail("world_size: a round closes when a joining node's own --nnodes is reached; the second joins "
                    "with 3 as the second participant, so the round waits for the third "
                    "(count the hosts hello gathered)")
    else:
        report.fail("world_size: give the number of ranks hello printed in the order 2, 3, 3, as an int; "
                    f"got {world_size!r}")
    first = _error_name(first_error)
    if first == "RendezvousTimeoutError":
        report.ok("3, 3, 2 never completes: the third torchrun joins as the 3rd participant, not its own 2, so no "
                  "node's count is met; the first waits until its join_timeout: RendezvousTimeoutError")
    elif first in LATER_ERRORS:
        report.fail(f"first_error: {first} is what the later torchruns see; the first one started earliest, so "
                    "its join deadline passes first: read the first torchrun's last line")
    elif _whole(first_error) is not None:
        report.fail("first_error: 3, 3, 2 does not start: torch checks for a count equal to the joining node's "
                    "--nnodes, and the third joins as the 3rd participant with 2: give the first torchrun's error")
    else:
        report.fail(f"first_error: give the name of the error the first torchrun raised; got {first_error!r}")
    return report
