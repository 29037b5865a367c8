import os
import time
from pathlib import Path

import pytest


def process_alive(pid: int) -> bool:
    """True if ``pid`` is a running process (zombies count as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def recorded_pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(pid_dir.glob("rank*.pid"))]


def wait_until_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    """Poll until none of ``pids`` runs, or ``seconds`` pass; return those still running."""
    end = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if process_alive(pid)]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.05)


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pids"
    d.mkdir()
    return d
