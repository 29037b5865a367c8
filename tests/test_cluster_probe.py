"""Whether two hosts can be made is tried, not guessed from being root: a container's root may
lack the rights to make network namespaces, and then the reason names the command that failed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ddp_lib.cluster import hosts

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces are Linux only")


def _refusing(command_word: str):
    def run(argv, **kwargs):
        if command_word in argv:
            return subprocess.CompletedProcess(argv, 1, "", "unshare failed: Operation not permitted\n")
        return subprocess.CompletedProcess(argv, 0, "", "")
    return run


@pytest.mark.parametrize("euid, who", [(0, "root"), (1000, "an ordinary user")])
def test_a_refused_namespace_is_the_reason_as_root_or_not(monkeypatch, euid, who):
    monkeypatch.setattr(hosts.os, "geteuid", lambda: euid)
    monkeypatch.setattr(hosts.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(hosts.subprocess, "run", _refusing("--net"))
    assert hosts.unavailable() == (f"`unshare --net --mount true` fails here (running as {who}): "
                                   "unshare failed: Operation not permitted")


def test_a_refused_ip_netns_is_the_reason(monkeypatch):
    monkeypatch.setattr(hosts.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(hosts.subprocess, "run", _refusing("add"))
    assert hosts.unavailable().startswith("`ip netns add` fails here")
