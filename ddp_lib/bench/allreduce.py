"""All-reduce time, algbw and busbw against message size for 2 and 4 ranks, as nccl-tests
prints them, next to this machine's limits: memory copy and loopback socket bandwidth.

    python -m ddp_lib bench allreduce [--quick] [--repeats N] [--json]
"""

from __future__ import annotations

import multiprocessing
import socket
import time

import torch

from ddp_lib.bench.ranks import allreduce_sweep
from ddp_lib.bench.report import algbw_gbs, busbw_gbs, human_bytes, run_main
from ddp_lib.bench.stats import median
from ddp_lib.launch import spawn

SIZES = [4**k for k in range(1, 14)]  # 4 B to 64 MiB
QUICK_SIZES = [4**k for k in (1, 3, 5, 7, 9, 11)]  # 4 B to 4 MiB
COLUMNS = [("world_size", "ranks", "d"), ("size", "size", "s"), ("count", "count", "d"), ("type", "type", "s"),
           ("time_us", "time (us)", ".1f"), ("algbw_gbs", "algbw (GB/s)", ".3f"), ("busbw_gbs", "busbw (GB/s)", ".3f")]


def copy_bandwidth_gbs(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """GB/s of one thread's ``dst.copy_(src)`` (bytes copied per second), the ceiling of any
    transfer between processes on this machine."""
    src, dst = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for repeat in range(repeats + 1):
            start = time.perf_counter()
            dst.copy_(src)
            if repeat:
                times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return nbytes / median(times) / 1e9


def _socket_sender(port: int, nbytes: int, rounds: int) -> None:
    """The other process of loopback_bandwidth_gbs: on each go byte, send nbytes."""
    payload = bytes(1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for _ in range(rounds):
            conn.recv(1)
            left = nbytes
            while left:
                left -= conn.send(memoryview(payload)[:min(left, len(payload))])


def loopback_bandwidth_gbs(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """GB/s of a raw TCP stream from a second process over 127.0.0.1: what gloo rides on here."""
    start_method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sender = multiprocessing.get_context(start_method).Process(
            target=_socket_sender, args=(server.getsockname()[1], nbytes, repeats + 1), daemon=True)
        sender.start()
        try:
            conn, _ = server.accept()
            with conn:
                buffer = memoryview(bytearray(1 << 20))
                times = []
                for repeat in range(repeats + 1):  # round 0 is warm-up
                    start = time.perf_counter()
                    conn.sendall(b"g")
                    left = nbytes
                    while left:
                        got = conn.recv_into(buffer, min(left, len(buffer)))
                        if not got:
                            raise ConnectionError("the sender closed the loopback connection early")
                        left -= got
                    if repeat:
                        times.append(time.perf_counter() - start)
        finally:
            sender.join(timeout=10)
            if sender.is_alive():
                sender.kill()
    return nbytes / median(times) / 1e9


def table_rows(world_size: int, sweep: list[dict]) -> list[dict]:
    """nccl-tests' columns for one world size from allreduce_sweep's medians."""
    rows = []
    for r in sweep:
        seconds, nbytes = r["all_reduce_s"], r["bytes"]
        rows.append({"world_size": world_size, "bytes": nbytes, "size": human_bytes(nbytes), "count": nbytes // 4,
                     "type": "float", "time_us": round(seconds * 1e6, 1),
                     "algbw_gbs": round(algbw_gbs(nbytes, seconds), 4),
                     "busbw_gbs": round(busbw_gbs(nbytes, seconds, world_size), 4)})
    return rows


def measure(quick: bool = False, repeats: int | None = None, world_sizes: tuple[int, ...] | None = None,
            sizes: list[int] | None = None) -> dict:
    """{"rows": one per (world size, size), "copy_gbs": ..., "loopback_gbs": ...}."""
    repeats = repeats or (2 if quick else 5)
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    world_sizes = world_sizes or ((2,) if quick else (2, 4))
    rows = []
    for world_size in world_sizes:
        sweep = spawn(allreduce_sweep, world_size, args=(sizes, repeats), show_output=False)[0]
        rows += table_rows(world_size, sweep)
    limit_bytes = max(sizes)
    return {"rows": rows, "copy_gbs": round(copy_bandwidth_gbs(limit_bytes, repeats), 3),
            "loopback_gbs": round(loopback_bandwidth_gbs(limit_bytes, repeats), 3)}


def _notes(result: dict) -> str:
    return (f"limits on this machine: memory copy (one thread) {result['copy_gbs']:.2f} GB/s, "
            f"loopback socket {result['loopback_gbs']:.2f} GB/s; busbw = algbw x 2(N-1)/N")


def main(argv: list[str]) -> int:
    return run_main(argv, "allreduce", __doc__, measure, COLUMNS, _notes)
