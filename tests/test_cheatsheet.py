"""docs/cheatsheet.md: its minimal script runs under torchrun and under its mp.spawn lines, and each error
in its table is one the lesson it names shows, in that lesson's text or stored outputs."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_launcher, torch_aborted_at_exit

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "cheatsheet.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", PAGE, re.DOTALL)
TORCHRUN = Path(sys.executable).with_name("torchrun")


def block(language: str, marker: str) -> str:
    (found,) = [code for lang, code in BLOCKS if lang == language and marker in code]
    return found


def error_rows() -> list[tuple[str, str]]:
    """(the error's text, the lesson notebook linked) for each row of the errors table."""
    table = PAGE.split("## Ten errors", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        seen, _, lesson = line.strip("|").split(" | ")
        rows.append((re.search(r"`([^`]+)`", seen).group(1), re.search(r"\(\.\./(notebooks/[^)]+)\)", lesson).group(1)))
    return rows


def test_the_table_has_ten_errors():
    assert len(error_rows()) == 10


@pytest.mark.parametrize("error, lesson", error_rows(), ids=lambda v: v[:40])
def test_each_error_is_shown_by_its_lesson(error, lesson):
    # What the lesson stores may shorten the end, or put placeholders for addresses and names.
    kind, _, message = error.partition(": ")
    if not message:  # only the exception's name: `torch....ChildFailedError:`
        message = kind.rstrip(":").rsplit(".", 1)[-1]
    key = re.split(r"\.\.\.|'hello'|\[127|PORT| Rank ", message)[0].strip()[:60]
    assert len(key) >= 12, error
    assert key in (ROOT / lesson).read_text(), (key, lesson)


@pytest.fixture
def script(tmp_path) -> Path:
    (tmp_path / "train.py").write_text(block("python", "# train.py"))
    return tmp_path


def test_the_minimal_script_runs_under_torchrun(script):
    if not TORCHRUN.exists():
        pytest.skip("torchrun is not installed next to this Python")
    line = block("bash", "torchrun").splitlines()[0].split("#")[0].split()
    assert line == ["torchrun", "--nproc-per-node=2", "train.py"]
    done = run_launcher([str(TORCHRUN), *line[1:]], cwd=script, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (script / "model.pt").is_file()


def test_the_minimal_script_runs_under_mp_spawn(script):
    launcher = block("python", "mp.spawn(")
    with socket.socket() as sock:  # a port free now, rather than 29500, which another test may hold
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (script / "launch.py").write_text(launcher.replace('"29500"', f'"{port}"'))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR")}
    for attempt in range(2):
        done = subprocess.run([sys.executable, "launch.py"], cwd=script, capture_output=True, text=True,
                              timeout=180, env=env)
        # torch's own abort at exit, once the model is saved, is tried once more; any other failure,
        # or the abort twice, fails the test.
        if not (torch_aborted_at_exit(done.stderr) and (script / "model.pt").is_file() and attempt == 0):
            break
        (script / "model.pt").unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    assert (script / "model.pt").is_file()
