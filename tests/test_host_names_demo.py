"""Lesson 06b's helpers: torch's rendezvous defaults, and this machine's names."""

import socket

from ddp_lib.demos.host_names import how_this_host_is_named, rendezvous_defaults


def test_rendezvous_defaults_are_torchs():
    assert rendezvous_defaults() == "join_timeout=600,last_call_timeout=30,close_timeout=30,heartbeat_timeout=5"


def test_how_this_host_is_named_agrees_with_socket():
    named = how_this_host_is_named()
    assert named["fqdn"] == socket.getfqdn()
    assert named["loopback"] == named["resolves_to"].startswith("127.")
