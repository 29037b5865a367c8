import time
from pathlib import Path

import pytest

from ddp_lib.workers.failures import process_alive


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
