"""Lesson 01: ``dist.TCPStore`` made the same way on every system."""

from __future__ import annotations

import sys

import torch.distributed as dist


def tcp_store(host: str, port: int, is_master: bool) -> dist.TCPStore:
    """``dist.TCPStore(host, port, is_master=is_master)``. On Windows it also passes ``use_libuv=False``:
    PyTorch's Windows builds lack libuv, the library a TCPStore's default server uses (lesson 00,
    "Deeper: when torch deletes the file, and libuv")."""
    return dist.TCPStore(host, port, is_master=is_master, use_libuv=sys.platform != "win32")
