"""Lesson 06b: torch's rendezvous defaults, and how this machine names itself
(what ``--standalone`` gives the ranks as ``MASTER_ADDR``)."""

from __future__ import annotations

import ipaddress
import socket

from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout


def rendezvous_defaults() -> str:
    """torch's rendezvous timeouts, in seconds, for a job without ``--rdzv-conf``,
    written as ``--rdzv-conf`` takes them."""
    defaults = RendezvousTimeout()
    return (f"join_timeout={defaults.join.seconds},last_call_timeout={defaults.last_call.seconds},"
            f"close_timeout={defaults.close.seconds},heartbeat_timeout={defaults.heartbeat.seconds}")


def how_this_host_is_named() -> dict:
    """What a host's full name comes from. ``resolves_to``: the address the host name resolves to;
    ``loopback``: whether that is a loopback address; ``fqdn``: ``socket.getfqdn()``, what torchrun
    publishes as ``MASTER_ADDR`` when given no ``--local-addr``."""
    address = socket.gethostbyname(socket.gethostname())
    return {"resolves_to": address, "loopback": ipaddress.ip_address(address).is_loopback, "fqdn": socket.getfqdn()}
