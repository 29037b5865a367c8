"""A write that finds no room: the launcher's own output capture is named as such, so is a rank's
result that its folder has no room for, and a checkpoint that cannot be written names its path.
The room runs out for real: the kernel's file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a
write fails with EFBIG as a full disk fails with ENOSPC), set in a fresh interpreter whose
forkserver, and so whose ranks, inherit it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import pythonpath_with_tests

LIMITED = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
"""


def _run_limited(code: str, tmp_path, limit: int = 50_000) -> subprocess.CompletedProcess:
    script = tmp_path / "limited.py"
    script.write_text(LIMITED.format(limit=limit) + textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": pythonpath_with_tests(), "TMPDIR": str(tmp_path)})


@pytest.fixture
def short_tmp():
    """A short TMPDIR: the forkserver's socket lives there, and a Unix socket's path may not exceed
    about 100 bytes (pytest's own temporary paths grow with its run counter)."""
    folder = Path(tempfile.mkdtemp(prefix="ddp-r-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_rank_whose_output_capture_finds_no_room_names_the_launchers_file(short_tmp):
    tmp_path = short_tmp
    out = _run_limited("""
        from ddp_lib.errors import WorkerError
        from ddp_lib.launch import run_ranks
        from launcher_workers import talk
        if __name__ == "__main__":
            try:
                run_ranks(talk, 1, kwargs={"lines": 10_000}, show_output=False)  # 200 kB of lines
            except WorkerError as e:
                print(e)
    """, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(f"rank 0 raised OSError: [Errno 27] File too large: writing to {tmp_path}/"), \
        out.stdout
    assert "/0/stdout.log, the file where ddp_lib's launcher captures this rank's output" in out.stdout


def test_a_result_that_finds_no_room_in_the_ranks_folder_is_one_line_naming_the_rank(short_tmp):
    tmp_path = short_tmp
    out = _run_limited("""
        from ddp_lib.errors import WorkerError
        from ddp_lib.launch import run_ranks
        from launcher_workers import big_result
        if __name__ == "__main__":
            try:
                run_ranks(big_result, 2, kwargs={"n": 100_000}, show_output=False)  # 400 kB each, pickled
            except WorkerError as e:
                print(e)
    """, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(f"rank 0 returned, but its result could not be written to {tmp_path}/"), out.stdout
    assert "/0/result.json, where ddp_lib's launcher reads it (File too large): make room there, or set TMPDIR" \
        in out.stdout
    assert len(out.stdout.splitlines()) == 1, out.stdout


def test_a_checkpoint_that_finds_no_room_names_its_path(tmp_path):
    out = _run_limited(f"""
        import torch
        from ddp_lib.demos.training_runs import save_epoch_checkpoint
        try:
            save_epoch_checkpoint({str(tmp_path / "ckpt")!r}, 1, {{"w": torch.ones(100_000)}})  # 400 kB
        except OSError as e:
            print(e)
    """, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == f"[Errno 27] File too large: checkpoint {tmp_path}/ckpt/epoch_001.pt could not be written\n"
    assert not list((tmp_path / "ckpt").iterdir())  # no temporary file left


def test_a_rank_whose_folder_has_no_room_even_for_its_error_is_one_line_naming_the_rank(short_tmp):
    tmp_path = short_tmp
    out = _run_limited("""
        from ddp_lib.errors import WorkerError
        from ddp_lib.launch import run_ranks
        from launcher_workers import big_result
        if __name__ == "__main__":
            try:
                run_ranks(big_result, 1, kwargs={"n": 1000}, show_output=False)
            except WorkerError as e:
                print(e)
    """, tmp_path, limit=300)  # room for rank.json, not for error.json
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("rank 0 exited with code 1, and its record (its result or its error) could not be "
                                 f"written to {tmp_path}/"), out.stdout
    assert out.stdout.endswith("/0: make room there, or set TMPDIR to a folder with room\n"), out.stdout
