"""Reading a failed launch's messages (lesson 07): small functions that pick, out of a rank's error,
stderr or traceback, the lines a person reads first, so a notebook cell shows only the call."""

from __future__ import annotations

import os
import re
import subprocess
import sys

LOST_PEER = re.compile(r"Connection (closed|reset) by peer|Broken pipe")  # gloo's words when the other end died
TIMED_OUT = re.compile(r"Timed out waiting \d+ms for (send|recv) operation|Application timeout caused pair closure")
_FINGERPRINT = re.compile(r"(Rank \d+) is running collective: CollectiveFingerPrint\("
                          r"SequenceNumber=\d+, OpType=(\w+), TensorShape=(\[[\d, ]*\])")
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+, in (\S+)', re.MULTILINE)
_FRAME_AND_CODE = re.compile(r'^\s*File "(?P<path>[^"]*)", line \d+, in (?P<name>\S+)\n(?P<code>[^\n]*)', re.MULTILINE)

# a whole reproducer of DDP's crash under TORCH_DISTRIBUTED_DEBUG=DETAIL on torch 2.13 with gloo:
# one process, its store a HashStore in the process's own memory, no launcher
DDP_UNDER_DETAIL = ("import torch.distributed as dist, torch.nn as nn\n"
                    "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
                    "nn.parallel.DistributedDataParallel(nn.Linear(4, 1))\n"
                    "print('built the DDP model')")


def ddp_build_exit_codes(levels: tuple[str, ...] = ("DETAIL", "INFO"), timeout_s: float = 300) -> dict[str, int]:
    """Run ``DDP_UNDER_DETAIL`` in a fresh Python once per ``TORCH_DISTRIBUTED_DEBUG`` level, all at
    once, and return each run's exit code: 0 if it built the DDP model, ``-signal`` if a signal ended
    it (``-11`` for SIGSEGV)."""
    runs = {level: subprocess.Popen([sys.executable, "-c", DDP_UNDER_DETAIL], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env={**os.environ, "TORCH_DISTRIBUTED_DEBUG": level})
            for level in levels}
    return {level: run.wait(timeout=timeout_s) for level, run in runs.items()}


def is_connection_error(message: str) -> bool:
    """Whether ``message`` blames a lost connection, as gloo words it from run to run:
    "Connection closed by peer", "Connection reset by peer" or "Broken pipe"."""
    return bool(LOST_PEER.search(message))


def is_timeout(message: str) -> bool:
    """Whether ``message`` is gloo's timeout, as gloo words it from run to run:
    "Timed out waiting ...ms for send (or recv) operation to complete" or "Application timeout caused
    pair closure"."""
    return bool(TIMED_OUT.search(message))


def detail_mismatch(message: str) -> list[str]:
    """The collectives a ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` mismatch error compares, one line each,
    such as ``"Rank 0: ALLREDUCE of shape [2]"``."""
    return [f"{who}: {op} of shape {shape}" for who, op, shape in _FINGERPRINT.findall(message)]


def innermost_calls(traceback_text: str, n: int = 3) -> list[str]:
    """The names of the ``n`` innermost functions of a Python traceback, innermost first."""
    return _FRAME.findall(traceback_text)[::-1][:n]


def innermost_own_call(traceback_text: str) -> str:
    """The innermost frame of a Python traceback outside torch's own files, as ``"function: code"``
    (the line of the script that called into torch); "" when every frame is torch's."""
    own = [(m["name"], m["code"].strip()) for m in _FRAME_AND_CODE.finditer(traceback_text)
           if f"{os.sep}torch{os.sep}" not in m["path"]]
    return f"{own[-1][0]}: {own[-1][1]}" if own else ""


def in_ddp_buffer_sync(traceback_text: str, n: int = 3) -> bool:
    """Whether one of the ``n`` innermost calls of a Python traceback is DDP's buffer broadcast,
    ``_sync_module_buffers`` in ``torch/nn/parallel/distributed.py`` (a private name, kept out of the
    lesson's cells)."""
    return "_sync_module_buffers" in innermost_calls(traceback_text, n)


def stack_for_reading(dump: str) -> str:
    """A faulthandler stack dump without what changes from run to run, or from one torch release to
    the next: thread ids become ``0x...``, a frame in torch's own files keeps no line number
    (``line ...``), and each file keeps its name only, without its folders."""
    dump = re.sub(r"0x[0-9a-f]+", "0x...", dump)
    dump = re.sub(r'(File "[^"]*/torch/[^"]*", line )\d+', r"\1...", dump)
    return re.sub(r'File "[^"]*/', 'File "', dump)
