"""The first-cluster mistakes, each run for real on two hosts of its own, each failing within a
bounded time (every wait of the rendezvous is set short here; torch's defaults are 600 s for a
join and 30 minutes for a gloo collective).

    jobs = run_mistakes()             # all at once: most of the time is waiting
    print(jobs["rdzv_on_loopback"].summary())
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from ddp_lib.cluster.hosts import Host, firewall_unavailable, listening, port_blocked, two_hosts
from ddp_lib.cluster.jobs import HELLO, RDZV_PORT, HostsJob, NodeRun, node_command, run_on_hosts
from ddp_lib.cluster.probe import TIMEOUT

# hello, but a rank that fails stays alive a while (probe.hello_lingering): the other rank's long wait shows.
HELLO_LINGERING = ["-m", "ddp_lib.torchrun", "ddp_lib.cluster.probe:hello_lingering"]

# Jobs that are meant to fail at the rendezvous wait 10 s for their peers, not 20.
SHORT_JOIN = "join_timeout=10,read_timeout=10,last_call_timeout=1,close_timeout=5"
# The --nnodes cases start node1 only once node0's store listens, and starting torchrun can take
# tens of seconds on a busy machine: node0 must still be waiting when node1 arrives.
STAGGERED_JOIN = "join_timeout=60,read_timeout=10,last_call_timeout=1,close_timeout=5"
# Every case ends on its own, within its timeouts plus start-up; this is only the backstop for a
# machine so busy that start-up alone takes minutes.
DEADLINE = 300


def rdzv_on_loopback() -> HostsJob:
    """node1 is given 127.0.0.1 as the rendezvous address (copied from a one-machine run). While the job
    runs, node1 is watched for a listener on the rendezvous port: ``job.node1_listened``."""
    with two_hosts() as (node0, node1), ThreadPoolExecutor(1) as pool:
        done = threading.Event()
        watched = pool.submit(_watch_listening, node1, RDZV_PORT, done)
        try:
            job = run_on_hosts([(node0, node_command(HELLO, rdzv_conf=SHORT_JOIN)),
                                (node1, node_command(HELLO, endpoint=f"127.0.0.1:{RDZV_PORT}", rdzv_conf=SHORT_JOIN))],
                               timeout=DEADLINE)
        finally:
            done.set()
        job.node1_listened = watched.result()
        return job


def _watch_listening(host: Host, port: int, done: threading.Event) -> bool:
    """Whether something on ``host`` listened on ``port`` at some poll before ``done`` was set."""
    while not done.is_set():
        if listening(host, port):
            return True
        done.wait(0.5)
    return False


def gloo_on_loopback() -> HostsJob:
    """gloo told to use the loopback interface (GLOO_SOCKET_IFNAME=lo, as on one machine). A rank that
    fails stays alive a while, so that the rank that waits reaches gloo's own timeout on either node."""
    with two_hosts() as (node0, node1):
        return run_on_hosts([(node0, node_command(HELLO_LINGERING)), (node1, node_command(HELLO_LINGERING))],
                            env={"GLOO_SOCKET_IFNAME": "lo"}, timeout=DEADLINE)


def gloo_on_eth0() -> HostsJob:
    """The fix: gloo told to use the interface that reaches the other host."""
    with two_hosts() as (node0, node1):
        return run_on_hosts([(node0, node_command(HELLO)), (node1, node_command(HELLO))],
                            env={"GLOO_SOCKET_IFNAME": "eth0"}, timeout=DEADLINE)


def port_closed() -> HostsJob:
    """A firewall on node0 drops the rendezvous port for packets from other hosts."""
    with two_hosts() as (node0, node1), port_blocked(node0, RDZV_PORT):
        return run_on_hosts([(node0, node_command(HELLO, rdzv_conf=SHORT_JOIN)),
                             (node1, node_command(HELLO, rdzv_conf=SHORT_JOIN))],
                            timeout=DEADLINE)


def store_port_closed() -> HostsJob:
    """node0's firewall lets other hosts reach the rendezvous port only: the rendezvous completes, then
    node1's rank cannot reach the ranks' store on node0, at a port picked at run time."""
    with two_hosts() as (node0, node1), port_blocked(node0, RDZV_PORT, all_others=True):
        return run_on_hosts([(node0, node_command(HELLO, rdzv_conf=SHORT_JOIN)),
                             (node1, node_command(HELLO, rdzv_conf=SHORT_JOIN))],
                            timeout=DEADLINE)


def nnodes_mismatch(first: int, second: int) -> HostsJob:
    """node0 is started with --nnodes ``first`` and joins first (it hosts the rendezvous store;
    node1 starts once that listens); node1 is started with --nnodes ``second``."""
    with two_hosts() as (node0, node1):
        return run_on_hosts([(node0, node_command(HELLO, nnodes=first, rdzv_conf=STAGGERED_JOIN)),
                             (node1, node_command(HELLO, nnodes=second, rdzv_conf=STAGGERED_JOIN))],
                            timeout=DEADLINE, others_start_when=lambda: listening(node0, RDZV_PORT))


def name_unknown(fixed: bool = False) -> HostsJob:
    """node1's /etc/hosts lacks node0, as in containers whose names only they know. node1 reaches
    the rendezvous by node0's address, but its ranks are given node0's name as MASTER_ADDR.
    ``fixed``: every node's torchrun gives its own address with ``--local-addr``."""
    with two_hosts() as (node0, node1):
        node1.write_hosts({node1.name: node1.addr})
        endpoint = f"{node0.addr}:{RDZV_PORT}"
        return run_on_hosts([(host, node_command(HELLO, endpoint=endpoint, rdzv_conf=SHORT_JOIN,
                                                 local_addr=host.addr if fixed else None))
                             for host in (node0, node1)], timeout=DEADLINE)


# What a rank's TCPStore client logs while it cannot look a host name up (getaddrinfo, "gai"):
# "The IPv6 network addresses of (node0, 42749) cannot be retrieved (gai error: -3 - ...)."
_UNRESOLVED = re.compile(r"The (?:IPv\d )?network addresses of \((\S+), \d+\) cannot be retrieved "
                         r"\(gai error: ([^)]*)\)")
_MASTER_ADDR = re.compile(r"\]\s+master_addr=(\S+)")  # the agent's INFO log once its rendezvous completes


def unresolved(node: NodeRun) -> str | None:
    """The first name lookup that failed on this node (``"node0: gai error ..."``), or None."""
    found = _UNRESOLVED.search(node.stderr)
    return f"{found[1]} ({found[2]})" if found else None


def master_addr(node: NodeRun) -> str | None:
    """The MASTER_ADDR this node's torchrun gave its ranks, from its log; None if it never did."""
    found = _MASTER_ADDR.search(node.stderr)
    return found[1] if found else None


MISTAKES = {"rdzv_on_loopback": rdzv_on_loopback, "gloo_on_loopback": gloo_on_loopback,
            "gloo_on_eth0": gloo_on_eth0, "port_closed": port_closed,
            # A round closes only when a node's own --nnodes is reached by its own arrival
            # (dynamic_rendezvous.py, _add_to_participants): the smaller count must join second.
            "nnodes_3_then_2": partial(nnodes_mismatch, 3, 2), "nnodes_2_then_3": partial(nnodes_mismatch, 2, 3)}


# The fifth mistake, run in a cell of its own: node0's name unknown to node1, and its fix.
NAME_UNKNOWN = {"name_unknown": name_unknown, "name_unknown_fixed": partial(name_unknown, True)}
# Run beside it: the rendezvous port open, the ports picked at run time closed (mistake 3's other half).
STORE_PORT = {"store_port_closed": store_port_closed}
FIREWALLED = ("port_closed", "store_port_closed")


def run_mistakes(names: tuple[str, ...] = tuple(MISTAKES)) -> dict[str, HostsJob]:
    """Run the named cases (of ``MISTAKES``, ``NAME_UNKNOWN`` and ``STORE_PORT``) at the same time, each
    on its own two hosts; those of ``FIREWALLED`` are left out where no firewall can be set (see
    :func:`firewall_unavailable`)."""
    names = tuple(n for n in names if n not in FIREWALLED or firewall_unavailable() is None)
    cases = {**MISTAKES, **NAME_UNKNOWN, **STORE_PORT}
    with ThreadPoolExecutor(len(names)) as pool:
        futures = {name: pool.submit(cases[name]) for name in names}
        return {name: future.result() for name, future in futures.items()}


SHORT_JOIN_S = int(dict(kv.split("=") for kv in SHORT_JOIN.split(","))["join_timeout"])


def since_rendezvous(node: NodeRun) -> float | None:
    """Seconds from the node's rendezvous start to its outcome (its first error, or its result);
    None where either is missing."""
    if node.rendezvous_at is None or node.outcome_at is None:
        return None
    return node.outcome_at - node.rendezvous_at


def raised(node: NodeRun, name: str) -> bool:
    """Whether this node's torchrun, or one of its ranks, raised the exception ``name``: in its first
    errors, or as the last line of torchrun's traceback (``...RendezvousConnectionError: ...``), which
    wraps the inner error that :meth:`NodeRun.errors` shows."""
    return any(name in e for e in node.errors()) or re.search(rf"^\S*\b{name}: ", node.stderr, re.M) is not None


def hosts_returned(job: HostsJob) -> str:
    """How many hosts ``hello`` returned on each rank of the job, in rank order."""
    return ", ".join(f"{len(r['hosts'])} on rank {r['rank']}" for r in sorted(job.results, key=lambda r: r["rank"]))


# What each job of MISTAKES should show, from the mistakes' explanations in lesson 06b:
# (the prediction in words, a check of it against the job[, what the job measured, printed beside it]).
PREDICTED = {
    "rdzv_on_loopback": (f"node1 listens on {RDZV_PORT}: a rendezvous store of its own; both nodes "
                         f"RendezvousTimeoutError, at least the {SHORT_JOIN_S} s join_timeout after their "
                         "rendezvous began",
                         lambda job: getattr(job, "node1_listened", False)
                         and all("RendezvousTimeoutError" in n.error()
                                 and (since_rendezvous(n) or 0) >= SHORT_JOIN_S for n in job.nodes)),
    "gloo_on_loopback": ("the rendezvous completed on both nodes; one rank's gloo connectFullMesh was refused at "
                         f"remote=[127.0.0.1], the other's gave up with Connect timeout, at least 5 x the group's "
                         f"{TIMEOUT.total_seconds():.0f} s after its rendezvous began",
                         lambda job: all(master_addr(n) for n in job.nodes)
                         and any("Connection refused, remote=[127.0.0.1]" in e for n in job.nodes for e in n.errors())
                         and any("Connect timeout" in e and (since_rendezvous(n) or 0) >= 5 * TIMEOUT.total_seconds()
                                 for n in job.nodes for e in n.errors())),
    "gloo_on_eth0": ("both nodes succeeded", lambda job: job.ok),
    "port_closed": (f"node1 timed out connecting to (node0, {RDZV_PORT}); node0 RendezvousTimeoutError",
                    lambda job: f"to connect to (node0, {RDZV_PORT})" in job.nodes[1].error()
                    and "RendezvousTimeoutError" in job.nodes[0].error()),
    "nnodes_3_then_2": ("succeeded, world size 2 though node0 said 3",
                        lambda job: job.ok and all(len(r["hosts"]) == 2 for r in job.results),
                        lambda job: f"hosts hello returned: {hosts_returned(job)}"),
    "nnodes_2_then_3": ("failed: node0 RendezvousTimeoutError, "
                        "node1 RendezvousClosedError or RendezvousConnectionError",
                        lambda job: not job.ok and "RendezvousTimeoutError" in job.nodes[0].error()
                        and (raised(job.nodes[1], "RendezvousClosedError")
                             or raised(job.nodes[1], "RendezvousConnectionError"))),
}


def report_mistakes(jobs: dict[str, HostsJob]) -> bool:
    """Print each job's nodes (how each ended, its first error, when: from its rendezvous's start to
    its first error, or its result), the world each rank that got as far as ``hello``'s all-gather
    ran in, then each job's prediction from ``PREDICTED`` checked against the run. Returns True when every one held."""
    for name, job in jobs.items():
        label = " (the correct job: the control)" if name == "gloo_on_eth0" else ""
        print(f"== {name}{label}\n{job.summary(rendezvous=True)}")
        for r in job.results:
            print(f"   rank {r['rank']} on {r['host']}: world size {len(r['hosts'])}, hosts gathered {r['hosts']}")
    held = True
    for name, (predicted, check, *measured) in PREDICTED.items():
        if name in jobs:
            ok = bool(check(jobs[name]))
            held = held and ok
            seen = "".join(f" ({m(jobs[name])})" for m in measured)
            print(f"{name}: {predicted}{seen}, as predicted: {ok}")
    return held
