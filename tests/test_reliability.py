"""Reliability with real processes: many launches, launches at once, and a notebook kernel
interrupted, restarted or shut down. (tools/reliability.py runs the longer checks.)"""

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import recorded_pids, start_kernel, wait_until_gone
from ddp_lib.launch import run_ranks
from ddp_lib.launch._processes import pid_alive
from ddp_lib.workers.basic import demo_basic

jupyter_client = pytest.importorskip("jupyter_client")


def test_no_rank_is_left_running_after_a_successful_launch(pid_dir):
    from ddp_lib.workers.faulty_ranks import raise_on_rank

    assert run_ranks(raise_on_rank, 3, (-1, str(pid_dir)), show_output=False) == [0, 1, 2]  # no rank is told to fail
    pids = recorded_pids(pid_dir)
    assert len(pids) == 3 and [p for p in pids if pid_alive(p)] == []


def test_fifty_launches_in_a_row_all_succeed():
    failures = []
    for i in range(50):
        try:
            results = run_ranks(demo_basic, 2, (i,), timeout=60, show_output=False)
            assert results[0]["checksum"] == results[1]["checksum"]
        except Exception as exc:  # counted: the assertion below reports them
            failures.append(repr(exc))
    assert failures == []


def test_ten_launches_at_once_never_collide_on_a_port():
    errors, done = [], []

    def one(i):
        try:
            done.append(run_ranks(demo_basic, 2, (i,), timeout=120, show_output=False))
        except Exception as exc:  # counted: the assertion below reports them
            errors.append(repr(exc))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(done) == 10


@pytest.fixture
def kernel(tmp_path):
    km, client = start_kernel(tmp_path)
    yield km, client
    client.stop_channels()
    km.shutdown_kernel(now=True)


HANG = "from ddp_lib.launch import run_ranks\nfrom launcher_workers import hang_all\nrun_ranks(hang_all, 2, ({!r},))"


def _start_hanging_job(client, pid_dir) -> list[int]:
    client.execute(HANG.format(str(pid_dir)))
    end = time.monotonic() + 120
    while len(recorded_pids(pid_dir)) < 2:
        assert time.monotonic() < end, "the ranks did not start"
        time.sleep(0.1)
    return recorded_pids(pid_dir)


def _reply_error(client, timeout=60) -> str:
    return _reply_error_content(client, timeout).get("ename", "")


def _reply_error_content(client, timeout=60) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            msg = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["msg_type"] == "error":
            return msg["content"]
    return {}


def _run_in_kernel(client, code: str) -> dict:
    # Right after an error ipykernel aborts requests that were already queued: ask again.
    for _ in range(5):
        reply = client.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
        if reply["content"]["status"] != "aborted":
            break
        time.sleep(1)
    return reply


FORKSERVER_PID = ("import multiprocessing.forkserver as f, os\n"
                  "pid = f._forkserver._forkserver_pid\n"
                  "assert pid and os.waitpid(pid, os.WNOHANG) == (0, 0), 'the forkserver has died'")


def test_the_stop_button_stops_every_rank(kernel, pid_dir):
    km, client = kernel
    pids = _start_hanging_job(client, pid_dir)
    km.interrupt_kernel()  # what JupyterLab's stop button sends: SIGINT to the kernel's process group
    error = _reply_error_content(client)
    assert (error.get("ename"), error.get("traceback")) == ("LaunchInterrupted", ["interrupted: ranks 0-1 stopped"])
    assert wait_until_gone(pids) == []
    # The kernel is still usable, and a new launch works. (Right after an error ipykernel
    # aborts requests that were already queued, so an "aborted" reply is asked again.)
    code = "from launcher_workers import talk\nassert run_ranks(talk, 2, show_output=False) == [0, 10]"
    for _ in range(5):
        reply = client.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
        if reply["content"]["status"] != "aborted":
            break
        time.sleep(1)
    assert reply["content"]["status"] == "ok"


def test_the_stop_button_during_a_kernels_first_launch_leaves_the_forkserver_usable(kernel):
    km, client = kernel
    # The first launch starts the forkserver, which imports torch for a second or more: press
    # stop meanwhile (SIGINT reaches the forkserver too, as a member of the kernel's group).
    imports = "from ddp_lib.launch import run_ranks\nfrom launcher_workers import hang_all"
    assert _run_in_kernel(client, imports)["content"]["status"] == "ok"
    client.execute("print('launching', flush=True)\nrun_ranks(hang_all, 2)")
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            msg = client.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["msg_type"] == "stream" and "launching" in msg["content"]["text"]:
            break
    time.sleep(0.3)
    km.interrupt_kernel()
    assert _reply_error(client) == "LaunchInterrupted"
    assert _run_in_kernel(client, FORKSERVER_PID)["content"]["status"] == "ok"
    code = ("from launcher_workers import talk\nbefore = f._forkserver._forkserver_pid\n"
            "assert run_ranks(talk, 2, show_output=False) == [0, 10]\nassert f._forkserver._forkserver_pid == before")
    assert _run_in_kernel(client, code)["content"]["status"] == "ok"


def test_restarting_the_kernel_mid_launch_leaves_no_rank_behind(kernel, pid_dir):
    km, client = kernel
    pids = _start_hanging_job(client, pid_dir)
    assert all(pid_alive(p) for p in pids)
    km.restart_kernel(now=True)  # kills the kernel: no clean-up code runs in it
    assert wait_until_gone(pids, seconds=15) == []


# What a lesson's cell may leave to the kernel's end: a TemporaryDirectory, removed by its finalizer,
# and an atexit handler. Both run only if the kernel exits by itself, not ended by a signal.
LEFT_TO_THE_END = """import atexit, json, tempfile
import multiprocessing.forkserver as f, multiprocessing.resource_tracker as t
folder = tempfile.TemporaryDirectory()
atexit.register(lambda: open({marker!r}, "w").close())
print(json.dumps([folder.name, f._forkserver._forkserver_pid, t._resource_tracker._pid]))"""

def _printed(client, code: str) -> str:
    out = []
    client.execute_interactive(code, timeout=60, output_hook=lambda msg: out.append(
        msg["content"]["text"] if msg["msg_type"] == "stream" else ""))
    return "".join(out)


FIRST_LAUNCH = {
    "a launch": "from launcher_workers import talk\nassert run_ranks(talk, 2, show_output=False) == [0, 10]",
    "live ranks": "%load_ext ddp_lib.live\n%ranks 2\nrank_pids = ranks.get('__import__(\"os\").getpid()')",
}


@pytest.mark.parametrize("first", FIRST_LAUNCH)
def test_a_kernel_that_launched_shuts_down_by_itself_in_seconds_and_runs_its_atexit_handlers(tmp_path, first):
    # ipykernel's shutdown waits until the kernel has no child left, up to 29 s: the forkserver and
    # multiprocessing's resource tracker (which ignores SIGTERM) once kept it waiting that long, and
    # Jupyter ended the kernel by a signal first. Live ranks still up hold the tracker's pipe open.
    km, client = start_kernel(tmp_path)
    try:
        code = "from ddp_lib.launch import run_ranks\n" + FIRST_LAUNCH[first]
        assert _run_in_kernel(client, code)["content"]["status"] == "ok"
        marker = tmp_path / "atexit ran"
        folder, *helpers = json.loads(_printed(client, LEFT_TO_THE_END.format(marker=str(marker))))
        if first == "live ranks":
            helpers += json.loads(_printed(client, "print(json.dumps(rank_pids))"))
        assert all(helpers) and all(pid_alive(pid) for pid in helpers)
        kernel = km.provisioner.process
        client.stop_channels()
        km.shutdown_wait_time = 20.0  # Jupyter's default is 5: it sends SIGTERM after half of it
        start = time.monotonic()
        km.shutdown_kernel()
        took = time.monotonic() - start
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    assert kernel.returncode == 0, f"the kernel was ended by signal {-kernel.returncode} after {took:.1f} s"
    assert took < 10  # ipykernel's own wait and torch's teardown: a second or two, more on a busy machine
    assert marker.exists() and not Path(folder).exists()
    assert wait_until_gone(helpers) == []


def test_the_tutorials_own_setup_and_cleanup_never_hang_on_teardown():
    # The tutorial's worker destroys its group itself, with no pause, and its DDP model dies
    # as it returns: with gloo that deadlocked 1 launch in 4 before the child kept the
    # worker's locals alive and left with os._exit. tools/reliability.py teardown runs 100.
    import tutorial_workers

    failures = []
    for i in range(20):
        try:
            run_ranks(tutorial_workers.demo_basic, 2, timeout=30, show_output=False)
        except Exception as exc:  # counted: the assertion below reports them
            failures.append(f"launch {i}: {exc!r}")
    assert failures == []


def test_a_group_destroyed_inside_a_function_the_worker_calls_is_held_from_its_creation():
    # An exercise checker calls the learner's function, whose model dies as it returns, right
    # after its cleanup(): the group must already be held then, however short the function
    # (a poll that looked for groups every 20 ms lost that race on a busy machine).
    import tutorial_workers

    for _ in range(10):
        held = run_ranks(tutorial_workers.basic_inside_a_function, 3, timeout=30, show_output=False)
        assert held == [1, 1, 1]


def test_process_groups_teardown_never_hangs_in_plain_processes():
    # Under torchrun or mp.spawn no launcher keeps the group: teardown()'s pause lets gloo's threads
    # finish before the DDP model, freed after it, drops the group's last reference. The same
    # ending with destroy_process_group() alone hung 8 of 40 runs on a busy 2-core machine.
    tool = Path(__file__).resolve().parent.parent / "tools" / "gloo_shutdown_check.py"
    proc = subprocess.run([sys.executable, str(tool), "--runs", "20", "--hang-seconds", "10", "teardown-return"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = proc.stdout.strip().splitlines()[-1].split()
    assert counts[:9] == ["teardown-return", "runs", "20", "ended", "20", "hung", "0", "failed", "0"], proc.stdout
