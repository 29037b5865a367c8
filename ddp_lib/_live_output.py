"""Rank 0's output shown while a job runs, and every rank's output as it stays on screen: a line
redrawn with carriage returns (a progress bar) is one line updated in place, kept in its last state.

:class:`ddp_lib._job.Job` polls a :class:`LiveOutput` while its ranks run, and reads each rank's
files with :func:`output_text` once they are done.
"""

from __future__ import annotations

import sys

_PREFIX = "[rank 0] "


class _LiveStream:
    """One of rank 0's output files, printed to ``target`` (this process's stdout or stderr) as it grows."""

    def __init__(self, path: str, target):
        self.path = path
        self.target = target
        self.offset = 0  # bytes of the file printed as whole lines
        self.status = ""  # the unfinished line being redrawn (a progress bar), as on screen now
        self.limit: int | None = None  # bytes past this are not shown (stacks written at the deadline)

    def take(self, final: bool) -> tuple[list[str], str]:
        """The lines finished since the last call (each in its last state), and the unfinished
        line if it is being redrawn ("" if none). ``final``: an unfinished line counts as finished."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return [], ""
        if self.limit is not None:
            data = data[:max(0, self.limit - self.offset)]
        cut = len(data) if final else data.rfind(b"\n") + 1
        self.offset += cut
        parts = _decode(data[:cut]).split("\n")
        if parts[-1] == "":
            parts.pop()
        lines = [line for line in map(_last_state, parts) if line is not None]
        partial = data[cut:]
        # Only a redrawn line is shown before it ends; other text waits for its newline. (An
        # incomplete UTF-8 character at the end waits too.)
        status = (_last_state(partial.decode("utf-8", errors="ignore")) or "") if b"\r" in partial else ""
        return lines, status

    def write(self, text: str) -> None:
        self.target.write(text)
        self.target.flush()


class LiveOutput:
    """Prints rank 0's stdout (and stderr) while the job runs, labelled ``[rank 0]``: each line
    once it ends, and an unfinished line that the rank redraws with carriage returns (a progress
    bar such as tqdm's) as one line updated in place, as a terminal and Jupyter show ``\r``.

    Jupyter shows stdout and stderr apart. In a terminal they share the screen: a bar shown on
    one is wiped while lines are printed on the other, then drawn again below them.
    """

    def __init__(self, stdout_path: str, stderr_path: str | None = None):
        self.streams = [_LiveStream(stdout_path, sys.stdout)]
        if stderr_path is not None:
            self.streams.append(_LiveStream(stderr_path, sys.stderr))
        self.shared_screen = len(self.streams) > 1 and all(_isatty(s.target) for s in self.streams)

    def poll(self, final: bool = False) -> None:
        """Print what rank 0 wrote since the last poll. ``final``: the job is over, so an
        unfinished last line is printed as a line."""
        for stream in self.streams:
            lines, status = stream.take(final)
            if lines or status != stream.status:
                self._show(stream, lines, status)

    def stop_stderr_at(self, limit: int | None) -> None:
        """Show none of rank 0's stderr past byte ``limit`` (where stacks written at the deadline begin)."""
        if len(self.streams) > 1:
            self.streams[1].limit = limit

    def _show(self, stream: _LiveStream, lines: list[str], status: str) -> None:
        others = [s for s in self.streams if s is not stream and s.status] if self.shared_screen else []
        for other in others:
            other.write(_wipe(other.status))
        text = "".join(f"{_PREFIX}{line}\n" for line in lines) + (f"{_PREFIX}{status}" if status else "")
        if stream.status:  # this stream's bar is on screen: write over it from the start of its line
            first, newline, rest = text.partition("\n")
            text = f"\r{first.ljust(len(_PREFIX + stream.status))}{newline}{rest}" if text else _wipe(stream.status)
        stream.write(text)
        stream.status = status
        for other in others:
            if status:  # this bar now holds the bottom line; the other is drawn again at its next change
                other.status = ""
            else:
                other.write(f"{_PREFIX}{other.status}")


def _wipe(status: str) -> str:
    """Carriage return, spaces over the bar, carriage return: its line left empty."""
    return "\r" + " " * len(_PREFIX + status) + "\r"


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


def _last_state(line: str) -> str | None:
    """A line as a terminal leaves it: of a line redrawn with carriage returns (a progress bar),
    its last non-blank state; None if it was wiped (spaces over it, as a bar that clears itself)."""
    if "\r" not in line:
        return line
    states = [state for state in line.split("\r") if state.strip()]
    return states[-1] if states else None


def output_text(data: bytes) -> str:
    """A rank's output as it would stay on screen: each line redrawn with carriage returns in its
    last state (a progress bar's hundreds of updates are one line), wiped lines left out."""
    text = _decode(data)
    if "\r" not in text:
        return text
    *lines, rest = text.split("\n")
    kept = "".join(f"{line}\n" for line in map(_last_state, lines) if line is not None)
    return kept + (_last_state(rest) or "")
