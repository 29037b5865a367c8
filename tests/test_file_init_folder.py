"""Lesson 00's rules for the `file://` init method: the folder must exist, the file may be absent or empty.

With a folder that does not exist, `init_process_group` neither returns nor raises: it is still
waiting long after its 1 s `timeout=`. With the folder there, the same one-rank call returns at once,
whether the file is absent (torch creates it) or an empty file made beforehand."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# one rank: it says when it calls init_process_group, and when that call has returned
RANK = """
import sys
from datetime import timedelta
import torch.distributed as dist
print("calling", flush=True)
dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1, timeout=timedelta(seconds=1))
print("joined", flush=True)
dist.destroy_process_group()
"""


def _start(path: Path) -> subprocess.Popen:
    rank = subprocess.Popen([sys.executable, "-c", RANK, path.as_uri()], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert rank.stdout.readline().strip() == "calling"  # torch is imported: the call starts now
    return rank


def test_a_missing_folder_waits_past_the_timeout(tmp_path):
    path = tmp_path / "missing_folder" / "some_file"
    rank = _start(path)
    try:
        time.sleep(5)  # five times the 1 s timeout=
        assert rank.poll() is None, rank.communicate()  # neither returned nor raised: still waiting
        assert not path.parent.exists()  # torch does not make the folder
    finally:
        rank.kill()
        rank.communicate()


def test_an_absent_or_empty_file_in_an_existing_folder_joins_at_once(tmp_path):
    (tmp_path / "empty_file").touch()
    for path in (tmp_path / "absent_file", tmp_path / "empty_file"):
        rank = subprocess.run([sys.executable, "-c", RANK, path.as_uri()], capture_output=True, text=True, timeout=60)
        assert rank.returncode == 0 and rank.stdout.split() == ["calling", "joined"], rank.stderr
