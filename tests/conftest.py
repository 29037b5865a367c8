import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddp_lib.launch._processes import pid_alive

# A shell without job control (a script's `cmd &`, some CI runners) starts background commands with
# SIGINT ignored, and an ignored signal stays ignored in every process started from this one: the
# tests that press Ctrl-C on a launcher, torchrun or live ranks would then wait in vain. Python's own
# handler here makes those processes start with SIGINT's default, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TESTS = str(Path(__file__).parent)  # the test workers' modules (launcher_workers, cli_workers, ...)


def torch_aborted_at_exit(stderr: str) -> bool:
    """Whether a plain-torch DDP script's rank died of torch's abort at exit (lesson 02, "Deeper: the
    rare abort at exit", about 1 run in 15 on two cores): after its work, while Python shut down, a gloo
    thread freeing DDP's last all-reduce was ended by the interpreter and C++ called std::terminate.
    Tests of such scripts run them once more on exactly this, after checking their work was done."""
    return "terminate called without an active exception" in stderr and (
        "terminated with signal SIGABRT" in stderr or "Signal 6 (SIGABRT)" in stderr)


def run_launcher(command: list[str], *, timeout: float, **popen_kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(command, capture_output=True, text=True, timeout=timeout)` for a command that
    starts ranks (torchrun). On timeout it sends SIGTERM first, so torchrun stops its ranks, which run
    in sessions of their own; `subprocess.run`'s timeout sends SIGKILL, which leaves them running
    after the test. Then it fails the test, naming the timeout."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          **popen_kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                stdout, stderr = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:  # a rank that ignores SIGTERM still holds the pipes
                proc.kill()
                stdout, stderr = "", "(not read: a process it started still held its output)"
            raise AssertionError(f"{' '.join(map(str, command))} did not finish within {timeout} s; "
                                 f"stopped. stderr: {stderr[-12000:]}") from None
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def pythonpath_with_tests() -> str:
    """PYTHONPATH for a fresh interpreter that imports the test workers by name (its ranks get its
    sys.path, so they find them too)."""
    return os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)


def screen(text: str) -> list[str]:
    """The lines a terminal shows after printing ``text``: a carriage return goes back to the
    start of the line, and what follows overwrites it (trailing spaces dropped)."""
    lines, line, column = [], [], 0
    for char in text:
        if char == "\n":
            lines.append("".join(line).rstrip())
            line, column = [], 0
        elif char == "\r":
            column = 0
        else:
            line[column:column + 1] = [char]
            column += 1
    return lines + (["".join(line).rstrip()] if "".join(line).strip() else [])


def recorded_pids(pid_dir: Path) -> list[int]:
    """The pids the ranks wrote so far (a file just created may not hold its pid yet)."""
    texts = (p.read_text().strip() for p in sorted(pid_dir.glob("rank*.pid")))
    return [int(text) for text in texts if text]


def wait_until_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    """Poll until none of ``pids`` runs, or ``seconds`` pass; return those still running."""
    end = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if pid_alive(pid)]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.05)


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    d = tmp_path / "pids"
    d.mkdir()
    return d


def _in_process_cli(monkeypatch, capsys):
    """A function running ``python -m ddp_lib ARGS`` inside this test process: ``main()`` is what
    ``__main__`` exits with, so the exit code, stdout and stderr are the command's own, without a
    fresh interpreter's ``import torch`` per case. Ranks fork from this process's forkserver."""
    import subprocess

    from ddp_lib import cli
    from ddp_lib.torchrun import _LAUNCH_VARS

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        with monkeypatch.context() as scoped:
            for name in _LAUNCH_VARS:  # a clean environment, as the subprocess tests give
                scoped.delenv(name, raising=False)
            for name, value in (env or {}).items():
                scoped.setenv(name, value)
            capsys.readouterr()
            try:
                code = cli.main(list(args))
            except SystemExit as exit_:  # --help: argparse exits, as it does in the real command
                code = exit_.code
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["python", "-m", "ddp_lib", *args], code, out, err)

    return run


@pytest.fixture
def cli_in_process(monkeypatch, capsys):
    """``python -m ddp_lib ARGS`` run inside this test process, for input the command line must
    refuse before any rank starts: starting a rank fails the test.

        out = cli_in_process("run", "hello", "--world-size", "0", env={"OMP_NUM_THREADS": "2"})
    """
    from ddp_lib.launch import _job

    def no_process(*args, **kwargs):
        raise AssertionError("a rank was started: the input should have been refused first")

    monkeypatch.setattr(_job.Job, "start", no_process)
    return _in_process_cli(monkeypatch, capsys)


@pytest.fixture
def cli_with_ranks(monkeypatch, capsys):
    """``python -m ddp_lib ARGS`` run inside this test process, its ranks real processes (forked
    from this process's forkserver): the command line's own behaviour (exit codes, what it prints,
    JSON) without a fresh interpreter per case. What only a real command shows (Ctrl-C, an exit
    code seen by a shell, torchrun) is tested with real processes in tests/test_cli.py."""
    return _in_process_cli(monkeypatch, capsys)


def start_kernel(cwd) -> tuple:
    """A real Jupyter kernel started in ``cwd`` (its ranks find the test workers) and its client,
    ready: (kernel manager, client)."""
    import jupyter_client

    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(cwd), env={**os.environ, "PYTHONPATH": pythonpath_with_tests()})
    client = km.client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    return km, client


@pytest.fixture
def free_master_port(monkeypatch):
    """A free port for ranks that join a group without a launcher's port, instead of the tutorial's default
    12355, which lessons 00 and 07 and the live-rank tests hold while they run on the other worker."""
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
