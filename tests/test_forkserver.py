"""ddp_lib.forkserver: the server starts at once, imports torch itself, and its children have it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = '''
import sys


def report(answer):
    answer.put("torch" in sys.modules)  # before anything in this child imports torch
'''

MAIN = '''
import json
import multiprocessing
import sys

from ddp_lib.forkserver import start_forkserver

if __name__ == "__main__":
    start_forkserver()
    torch_here = "torch" in sys.modules
    import probe

    ctx = multiprocessing.get_context("forkserver")
    answer = ctx.SimpleQueue()
    child = ctx.Process(target=probe.report, args=(answer,))
    child.start()
    torch_in_child = answer.get()
    child.join()
    print(json.dumps({"torch in the caller": torch_here, "torch in the child": torch_in_child}))
'''


def test_start_forkserver_leaves_torch_to_the_server(tmp_path):
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    (tmp_path / "main.py").write_text(textwrap.dedent(MAIN))
    result = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"torch in the caller": False,
                                                                  "torch in the child": True}


WAIT = '''
import multiprocessing
import sys

from ddp_lib.forkserver import wait_for_forkserver

if __name__ == "__main__":
    wait_for_forkserver()  # starts the server too
    print("waited; torch in the caller:", "torch" in sys.modules)
'''


def test_wait_for_forkserver_starts_the_server_and_returns_once_a_child_has_run(tmp_path):
    (tmp_path / "main.py").write_text(textwrap.dedent(WAIT))
    result = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "waited; torch in the caller: False"
