"""Where a rank's threads are, written by the rank as data when asked: the part of a rank's record
that names where a hung rank was.

A thread in each rank waits for a request file; when one appears, it writes every other thread's
stack (``sys._current_frames()`` through ``traceback.extract_stack``) as JSON, whole, beside it.
A thread, not a signal handler: Python runs a signal handler only in the main thread, between two
bytecodes, so not while that thread waits in torch's C++ (a collective that never completes), which
releases the interpreter to other threads. The same request works for the launcher's ranks and torchrun's
(``stacks.request`` and ``stacks.json`` in each rank's folder) and on other hosts (a shared folder).

Imports no torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

POLL_S = 0.05  # how often a rank looks for a request
ANSWER_WAIT_S = 3.0  # how long a supervisor waits for the ranks asked to answer (less when all have)


def current_stacks() -> list[dict]:
    """Every thread of this process but the caller's: ``{"name", "main", "frames"}``, the frames
    innermost first, each ``[path, line, function]``; the main thread first."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main, me = threading.main_thread().ident, threading.get_ident()
    threads = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        frames = [[f.filename, f.lineno, f.name] for f in reversed(traceback.extract_stack(frame))]
        threads.append({"name": names.get(ident, f"0x{ident:x}"), "main": ident == main, "frames": frames})
    return sorted(threads, key=lambda thread: not thread["main"])


def answer_requests(request: str | os.PathLike, answer: str | os.PathLike) -> None:
    """In a rank: start a daemon thread that, whenever ``request`` exists, writes
    :func:`current_stacks` to ``answer`` (whole: a temporary file, then renamed) and removes the request."""
    request, answer = Path(request), Path(answer)

    def serve() -> None:
        while True:
            time.sleep(POLL_S)
            if not request.exists():
                continue
            with contextlib.suppress(OSError):
                partial = answer.with_name(f".{answer.name}.{os.getpid()}")
                partial.write_text(json.dumps(current_stacks()))
                os.replace(partial, answer)
                request.unlink()

    threading.Thread(target=serve, name="ddp_lib-stacks", daemon=True).start()


def ask(pairs: dict[object, tuple[Path, Path]], wait: float = ANSWER_WAIT_S) -> dict[object, list[dict]]:
    """In a supervisor: ask each rank of ``pairs`` (``{key: (request, answer)}``) for its stacks and
    wait up to ``wait`` seconds for the answers; ``{key: threads}`` for those that answered."""
    for request, answer in pairs.values():
        with contextlib.suppress(OSError):
            answer.unlink(missing_ok=True)
            request.touch()
    answers: dict[object, list[dict]] = {}
    end = time.monotonic() + wait
    while pairs and len(answers) < len(pairs) and time.monotonic() < end:
        time.sleep(POLL_S)
        for key, (_, answer) in pairs.items():
            if key not in answers:
                with contextlib.suppress(OSError, ValueError):
                    answers[key] = json.loads(answer.read_text())
    return answers


def as_text(threads: list[dict]) -> str:
    """The stacks as a person reads them, in faulthandler's layout (most recent call first). Display only."""
    blocks = []
    for thread in threads:
        head = f"{'Main thread' if thread['main'] else 'Thread'} {thread['name']!r} (most recent call first):"
        blocks.append("\n".join([head, *(f'  File "{path}", line {line} in {function}'
                                         for path, line, function in thread["frames"])]))
    return "\n\n".join(blocks) + "\n" if blocks else ""
