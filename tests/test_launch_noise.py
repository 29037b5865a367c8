"""What a learner sees when something fails: only what they can act on. No C++ build paths or
stacks in a summary, a syntax error shown as its file, line and caret, no colour codes."""

from __future__ import annotations

import importlib
import sys

import launcher_workers
import pytest

from ddp_lib.errors import WorkerError, without_build_paths
from ddp_lib.launch import run_ranks

GLOO_MESSAGE = "\n".join([
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[127.0.0.1]:41234",
    "Exception raised from recvBytes at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/Utils.hpp:671 "
    "(most recent call first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f00 in /x/libc10.so)",
    "frame #1: <unknown function> + 0x12 (0x7f01 in /x/libtorch_cpu.so)",
    "",
])


def test_torchs_build_paths_and_cpp_stack_are_left_out():
    assert without_build_paths(GLOO_MESSAGE) == "Connection closed by peer [127.0.0.1]:41234"


def test_a_syntax_error_in_a_worker_file_shows_the_file_line_and_caret(tmp_path, monkeypatch):
    module = tmp_path / "learner_worker_with_typo.py"
    module.write_text("def work(rank, world_size):\n    return rank\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    work = importlib.import_module("learner_worker_with_typo").work
    # The learner edits the file after importing it; each rank imports it fresh.
    module.write_text("def work(rank, world_size):\n    return rank +\n")
    try:
        with pytest.raises(WorkerError) as info:
            run_ranks(work, 1, show_output=False)
    finally:
        sys.modules.pop("learner_worker_with_typo", None)
    tb = info.value.worker_traceback
    assert tb.startswith(f'  File "{module}", line 2\n    return rank +\n'), tb
    assert "^" in tb and tb.rstrip().splitlines()[-1].startswith("SyntaxError: invalid syntax")
    assert "importlib" not in tb and "Traceback" not in tb


def test_ranks_are_told_to_print_no_colour_codes(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # as a Jupyter kernel sets it
    seen = run_ranks(launcher_workers.report_named_env, 1, args=(("PYTHON_COLORS", "NO_COLOR"),), show_output=False)
    assert seen == [{"PYTHON_COLORS": "0", "NO_COLOR": "1"}]


def test_a_peer_failure_with_silent_ranks_names_them():
    with pytest.raises(WorkerError) as info:
        run_ranks(launcher_workers.echo_a_peer_failure, 3, show_output=False)
    assert str(info.value) == (
        "rank 0 raised DistBackendError: Gloo connectFullMesh failed with Connection closed by peer [127.0.0.1]:41234 "
        "(launcher: ranks 1, 2 had not reported when the job was stopped; see their output)")
