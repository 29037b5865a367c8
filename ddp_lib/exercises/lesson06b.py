"""Checker for lesson 06b's exercise 4: mismatched ``--nnodes`` replayed with two torchruns on one machine.

The learner writes down what the two runs showed (or predicts it): which order completes, the world size
``hello`` prints there, and how each torchrun of the other order ends. No torch is needed to check it.
"""

import re

from ddp_lib.exercises.checking import Report

# The two errors the second torchrun of the failing order may end with, by a race (docs/answers.md):
# the first closes the rendezvous on its way out, and it hosts the store, which ends with it.
# torchrun's last line for a lost store is RendezvousConnectionError, with DistNetworkError inside.
SECOND_ERRORS = ("RendezvousClosedError", "DistNetworkError", "RendezvousConnectionError")
KNOWN_ERRORS = ("RendezvousTimeoutError", *SECOND_ERRORS, "DistStoreError", "TimeoutError")
FORM = ("check_nnodes_reading(completes=(first --nnodes, second --nnodes), world_size=int, "
        "first_error='ErrorName', second_error='ErrorName')")


def _order(value: object) -> tuple[int, int] | None:
    """An order of the two torchruns written as (3, 2), [3, 2], "3 then 2", "3,2" or "nnodes_3_then_2"."""
    numbers = re.findall(r"\d+", value) if isinstance(value, str) else value
    try:
        first, second = (int(n) for n in numbers)
    except (TypeError, ValueError):
        return None
    return first, second


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


def check_nnodes_reading(completes: object = None, world_size: object = None, first_error: object = None,
                         second_error: object = None) -> Report:
    """A report on exercise 4's reading, one line per part: the order that completes, ``hello``'s world
    size in it, and the error of the first and of the second torchrun in the order that does not."""
    report = Report()
    if completes is None and world_size is None and first_error is None and second_error is None:
        report.fail(f"write your reading: {FORM}")
        return report
    order = _order(completes)
    if order == (3, 2):
        report.ok("--nnodes=3 first, then --nnodes=2 completes")
    elif order == (2, 3):
        report.fail("the round closes when the participants reach the count of the node that joins: in 2 then 3, "
                    "the node that joins has 3, and only 2 ever come")
    else:
        report.fail(f"completes: give the two --nnodes in the order started, such as (3, 2); got {completes!r}")
    size = _whole(world_size)
    if size == 2:
        report.ok("hello prints a world of 2 ranks, whatever the first node's --nnodes said")
    elif size == 3:
        report.fail("world_size: the round closed with 2 participants; the ranks' world comes from the round, "
                    "not from the first node's --nnodes (count the hosts hello gathered)")
    else:
        report.fail(f"world_size: give the number of ranks hello printed, as an int; got {world_size!r}")
    first = _error_name(first_error)
    if first == "RendezvousTimeoutError":
        report.ok("the first torchrun (--nnodes=2) waits alone until its join_timeout: RendezvousTimeoutError")
    elif first in SECOND_ERRORS:
        report.fail(f"first_error: {first} is what the second torchrun sees; the first one started earlier, so its "
                    "join deadline passes first: read the first torchrun's last line")
    else:
        report.fail(f"first_error: give the name of the error the first torchrun raised; got {first_error!r}")
    second = _error_name(second_error)
    if second in SECOND_ERRORS:
        report.ok(f"the second torchrun ends with {second}: the first closed the rendezvous and took its store "
                  "with it (the other of the two errors can come instead, by timing)")
    elif second == "RendezvousTimeoutError":
        report.fail("second_error: the second torchrun's deadline is 10 s later than the first's; before it comes, "
                    "the first closes the rendezvous and ends the store it hosts: read the second torchrun's own error")
    else:
        report.fail(f"second_error: give the name of the error the second torchrun raised; got {second_error!r}")
    return report
