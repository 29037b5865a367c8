"""Two "hosts" on one Linux machine, each with its own network: a network namespace per host,
joined by a veth pair, each end called ``eth0`` with an address in a private test range, loopback
up, and per host its own host name and ``/etc/hosts``. Needs root and Linux.

    with two_hosts() as (node0, node1):
        subprocess.run(node1.command(["getent", "hosts", "node0"]))   # 10.200.0.1  node0

Everything made here is removed on the way out, on an error, Ctrl-C or SIGTERM too: the
processes left in the namespaces, the namespaces (which takes the veth pair with them) and the
files. A run that was killed outright (SIGKILL) leaves namespaces named after its process id;
the next ``two_hosts()`` removes those whose process is gone (or ``python -m ddp_lib.cluster.hosts
--clean``).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ddp_lib.errors import first_line
from ddp_lib.launch._processes import pid_alive

PREFIX = "ddpl"  # every namespace and link made here starts with it, then the owner's pid in hex
SUBNET = "10.200.0"  # a private test range, used only inside the namespaces made here
IFNAME = "eth0"  # each host's interface to the other, as on a typical machine
_WORKDIR = "ddp_lib-hosts-"  # temporary directories: this, then the namespaces' tag

_pairs = itertools.count()  # several pairs may exist at once (their namespaces keep them apart)
_probes = itertools.count()

# Run inside the namespace: give the host its own name, /etc/hosts and /etc/resolv.conf (in
# private UTS and mount namespaces, so the machine's own stay as they are), then run the command.
# The resolver is pointed at the host's own loopback: a name missing from /etc/hosts fails at
# once instead of waiting for a name server the namespace cannot reach.
_ENTER = ('mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && hostname "$2" '
          '&& shift 2 && exec "$@"')


def unavailable() -> str | None:
    """Why hosts cannot be made here (one sentence), or None if they can. Tries what
    ``two_hosts`` needs (a network namespace with ``unshare``, a named one with ``ip netns``):
    root alone is not enough in a container without CAP_SYS_ADMIN."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature; this is {sys.platform}"
    for tool in ("ip", "nsenter", "unshare", "mount", "hostname"):
        if shutil.which(tool) is None:
            return f"the {tool!r} command is not installed (iproute2 / util-linux)"
    user = "root" if os.geteuid() == 0 else "an ordinary user"
    tried = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, text=True)
    if tried.returncode != 0:
        return f"`unshare --net --mount true` fails here (running as {user}): {first_line(tried.stderr, 'no message')}"
    probe = f"{PREFIX}{os.getpid():x}nprobe{next(_probes)}"  # unique: several threads may ask at once
    tried = _ip("netns", "add", probe, check=False)
    if tried.returncode != 0:
        return f"`ip netns add` fails here (running as {user}): {first_line(tried.stderr, 'no message')}"
    _ip("netns", "del", probe, check=False)
    return None


def listening(host: Host, port: int) -> bool:
    """Whether something on ``host`` listens on TCP ``port``."""
    out = subprocess.run(["nsenter", f"--net=/run/netns/{host.netns}", "ss", "-Hltn", f"sport = :{port}"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


@dataclass
class Host:
    """One host: its name, its address on ``eth0``, its namespace and its /etc/hosts file."""

    name: str
    addr: str
    netns: str
    hosts_file: str

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` as a command that runs on this host (its network, name and /etc/hosts)."""
        # nsenter, not `ip netns exec`: that also remounts /sys, which hides the machine's
        # cgroup file systems from daemons that look for them (slurmd).
        return ["nsenter", f"--net=/run/netns/{self.netns}", "unshare", "--uts", "--mount", "--",
                "sh", "-c", _ENTER, self.hosts_file, self.resolv_file, self.name, *argv]

    @property
    def resolv_file(self) -> str:
        return os.path.join(os.path.dirname(self.hosts_file), "resolv.conf")

    def write_hosts(self, entries: dict[str, str]) -> None:
        """Replace this host's /etc/hosts with ``{name: address}`` (plus localhost); commands
        started afterwards see it."""
        lines = ["127.0.0.1 localhost"] + [f"{addr} {name}" for name, addr in entries.items()]
        with open(self.hosts_file, "w") as f:
            f.write("\n".join(lines) + "\n")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _owner(name: str) -> int | None:
    """The process id a namespace or link made here is named after (ddpl<pid in hex>n...)."""
    digits = name[len(PREFIX):].split("n")[0]
    try:
        return int(digits, 16) if name.startswith(PREFIX) else None
    except ValueError:
        return None


def our_namespaces() -> list[str]:
    """Namespaces whose names say they were made here (by any process)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def our_links() -> list[str]:
    """Links in this (the machine's) namespace whose names say they were made here."""
    out = _ip("-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [name for name in names if name.startswith(PREFIX)]


def _orphaned(name: str) -> bool:
    """Whether what ``name`` names was made here by a process that no longer runs (or by no
    process this module can tell)."""
    owner = _owner(name)
    return owner is None or not pid_alive(owner)


def _workdirs() -> dict[str, str]:
    """The temporary directories made here, each with the name its owner is told by."""
    found = glob.glob(os.path.join(tempfile.gettempdir(), f"{_WORKDIR}{PREFIX}*"))
    return {workdir: os.path.basename(workdir)[len(_WORKDIR):] for workdir in found}


def left_behind(pid: int) -> list[str]:
    """Namespaces, links and temporary directories that should not exist once process ``pid``
    has left every ``two_hosts()``: those named after it, and those whose owner no longer runs."""
    named = {name: name for name in our_namespaces() + our_links()} | _workdirs()
    return [thing for thing, name in named.items() if _owner(name) == pid or _orphaned(name)]


def kill_everything_in(netns: str) -> None:
    """SIGKILL every process in ``netns``; wait (up to a few seconds) until none is left."""
    for _ in range(100):
        pids = [int(p) for p in _ip("netns", "pids", netns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def remove_namespace(netns: str) -> None:
    """Kill every process in ``netns``, then delete it (its end of a veth pair goes with it)."""
    kill_everything_in(netns)
    _ip("netns", "del", netns, check=False)


def clean_stale(everything: bool = False) -> list[str]:
    """Remove namespaces, links and temporary directories made here by processes that no longer
    run (or all of them with ``everything``); return their names."""
    removed = []
    for netns in our_namespaces():
        if everything or _orphaned(netns):
            remove_namespace(netns)
            removed.append(netns)
    for link in our_links():
        if everything or _orphaned(link):
            _ip("link", "del", link, check=False)
            removed.append(link)
    for workdir, name in _workdirs().items():
        if everything or _orphaned(name):
            shutil.rmtree(workdir, ignore_errors=True)
            removed.append(workdir)
    return removed


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while inside, so that the cleanup below runs (only in the
    main thread, and only where nobody else handles SIGTERM)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def two_hosts(names: tuple[str, str] = ("node0", "node1")) -> Iterator[tuple[Host, Host]]:
    """Make two hosts, ``names[0]`` at 10.200.0.1 and ``names[1]`` at 10.200.0.2, each knowing
    both names in its /etc/hosts; remove everything on the way out."""
    reason = unavailable()
    if reason:
        raise RuntimeError(f"cannot make hosts here: {reason}")
    clean_stale()
    tag = f"{PREFIX}{os.getpid():x}n{next(_pairs)}"  # links: at most 15 characters
    workdir = tempfile.mkdtemp(prefix=f"{_WORKDIR}{tag}-")
    hosts = [Host(name, f"{SUBNET}.{i + 1}", f"{tag}h{i}", os.path.join(workdir, f"{name}.hosts"))
             for i, name in enumerate(names)]
    links = [f"{tag}a", f"{tag}b"]
    with open(os.path.join(workdir, "resolv.conf"), "w") as f:
        f.write("nameserver 127.0.0.1\n")
    with _sigterm_as_exit():
        try:
            for host in hosts:
                _ip("netns", "add", host.netns)
            _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
            for host, link in zip(hosts, links):
                _ip("link", "set", link, "netns", host.netns)
                _ip("-n", host.netns, "link", "set", link, "name", IFNAME)
                _ip("-n", host.netns, "addr", "add", f"{host.addr}/24", "dev", IFNAME)
                _ip("-n", host.netns, "link", "set", IFNAME, "up")
                _ip("-n", host.netns, "link", "set", "lo", "up")
                host.write_hosts({h.name: h.addr for h in hosts})
            yield hosts[0], hosts[1]
        finally:
            for host in hosts:
                remove_namespace(host.netns)
            for link in links:  # only if making the pair failed half-way
                if link in our_links():
                    _ip("link", "del", link, check=False)
            shutil.rmtree(workdir, ignore_errors=True)


def firewall_unavailable() -> str | None:
    """Why a port cannot be blocked on a host here (one sentence), or None if it can (nft)."""
    if shutil.which("nft") is None:
        return unavailable() or "the nft command is not installed (apt-get install nftables)"
    return unavailable()


@contextmanager
def port_blocked(host: Host, port: int, *, all_others: bool = False) -> Iterator[None]:
    """While inside, ``host`` drops TCP packets that arrive on eth0 for ``port``, as a firewall
    between machines would (its own loopback still reaches it). ``all_others``: drop new TCP
    connections on eth0 to every port *but* ``port`` instead (replies to its own calls still pass)."""
    rule = (f"  iifname {IFNAME} ct state established,related accept\n  iifname {IFNAME} tcp dport != {port} drop\n"
            if all_others else f"  iifname {IFNAME} tcp dport {port} drop\n")
    rules = (f"table inet ddp_lib_firewall {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n"
             f"{rule} }}\n}}\n")
    nft = ["ip", "netns", "exec", host.netns, "nft"]
    subprocess.run(nft + ["-f", "-"], input=rules, text=True, check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(nft + ["delete", "table", "inet", "ddp_lib_firewall"], capture_output=True)


if __name__ == "__main__":
    # python -m ddp_lib.cluster.hosts --clean   removes every namespace and link made here
    if sys.argv[1:] != ["--clean"]:
        sys.exit("usage: python -m ddp_lib.cluster.hosts --clean")
    print("\n".join(clean_stale(everything=True)) or "nothing to remove")
