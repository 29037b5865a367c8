"""Which process is listening on a TCP port, for errors that say who holds a fixed port.

Linux: the listening socket's inode from /proc/net/tcp and /proc/net/tcp6, then the process
whose /proc/PID/fd links to it. Elsewhere, or when /proc hides it: ``lsof`` if installed.
Best effort: None when the holder cannot be found (another user's process, no /proc, no lsof).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return "?"
    return " ".join(" ".join(words).split())[:120] or "?"


def _holds(pid: int | str, sockets: set[str]) -> bool:
    """Whether process ``pid`` has one of ``sockets`` ("socket:[inode]") open; False if it cannot be read."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") in sockets for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` here (Linux's /proc)."""
    return _holds(pid, {f"socket:[{inode}]" for inode in _listening_inodes(port)})


def _holder_from_proc(port: int) -> tuple[int | None, str] | None:
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _holds(entry, wanted):
            return int(entry), _process_name(int(entry))
    return None, "a process this user cannot see"


def _holder_from_lsof(port: int) -> tuple[int, str] | None:
    lsof = shutil.which("lsof")
    if not lsof:
        return None
    try:
        out = subprocess.run([lsof, "-nP", f"-iTCP:{port}", "-sTCP:LISTEN", "-Fpc"], capture_output=True,
                             text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    pid, name = re.search(r"^p(\d+)", out, re.M), re.search(r"^c(.+)$", out, re.M)
    return (int(pid.group(1)), name.group(1) if name else "?") if pid else None


def _holder(port: int) -> tuple[int | None, str] | None:
    """(PID, command line) of whoever listens on TCP ``port`` here; PID None where /proc hides it."""
    if os.path.isdir("/proc/net"):
        return _holder_from_proc(port)
    return _holder_from_lsof(port)


def port_holder(port: int) -> str | None:
    """"process PID (command line)" of whoever listens on TCP ``port`` here, or None if unknown."""
    found = _holder(port)
    if found is None:
        return None
    pid, command = found
    return command if pid is None else f"process {pid} ({command})"


def holder_summary(port: int) -> tuple[int, str] | None:
    """(PID, the first six words of its command line) of whoever listens on TCP ``port`` here, or None.

    The Python interpreter's path shows as "python", so that the line reads the same on every machine."""
    found = _holder(port)
    if found is None or found[0] is None:
        return None
    pid, command = found
    return pid, " ".join(command.replace(sys.executable, "python").split()[:6])


def taken_port_hint(port: int | None, fix: str = "set MASTER_PORT to a free port") -> str:
    """" (port P is already taken by process PID (command): stop it, or <fix>)" when another process
    holds ``port`` now, else "" (no port, or a port free again)."""
    from ddp_lib.process_group import port_in_use  # imports torch: only when a rank failed

    if port is None or not port_in_use(port):
        return ""
    holder = port_holder(port)
    return f" (port {port} is already taken{f' by {holder}' if holder else ''}: stop it, or {fix})"
