"""Run every lesson in JupyterLab, in a real browser, as a learner does, and report what they would hit.

    python tools/browser_check.py                       # every lesson
    python tools/browser_check.py 00_start_here.ipynb   # some lessons

JupyterLab starts with ``make lab``'s options on a copy of ``notebooks/`` (so nothing tracked is
written, not even by JupyterLab's autosave), and Chromium, driven by Playwright, does for each lesson
what a learner does:

1. opens it and waits for its kernel: the lesson must not show as modified (JupyterLab marks a
   notebook modified when the kernel's ``language_info`` differs from the one it was served, on any
   Python: ddp_lib/lab_contents.py);
2. runs Kernel > Restart Kernel and Run All Cells, timing every cell: a cell may take its stated time
   ("about N s" in the text just before it, with a margin for a busy machine) or ``DEFAULT_CELL_LIMIT``;
3. fails on a cell that runs for more than ``SILENT_LIMIT`` seconds before showing any output (the
   learner sees a blank cell and cannot tell a slow start from a hang), stretched by the machine's
   load per CPU where it is busy;
4. fails on an error output in a cell not tagged ``raises-exception``.

Then, in a scratch notebook, it presses the stop button while a launch is running, once during the
kernel's first launch and once later: the cell must end with one short line, no rank may be left
running, and the next launch in the same kernel must work. The kernel's first launch must say, before
its ranks start, that it is starting the forkserver (a blank wait of seconds otherwise), and no later
launch may say it again.

The browser is the platform's Chromium (``chromium`` on Debian; ``CHROMIUM=/path`` for another);
Playwright's own browser builds are never downloaded. Where no browser or no Playwright can be had,
it prints why and exits 0 with "skipped". The last line is "N passed, N failed".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_lab  # noqa: E402  (tools/ is not a package)

from ddp_lib.launch._forkserver import FORKSERVER_NOTICE  # noqa: E402

ROOT = check_lab.ROOT
LESSONS = ROOT / "notebooks"
DEFAULT_CELL_LIMIT = 90.0  # s: a cell whose text states no time
STATED_MARGIN = 3.0  # a stated time may be exceeded this many times over (a busy machine, a cold start)
LESSON_LIMIT = 900.0  # s for one lesson's Run All
# s a running cell may show nothing: an import cell on a busy machine takes up to about 25 s.
SILENT_LIMIT = 30.0
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")  # an error output, or a rank's traceback
VISIBLE = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# "about 20 s", "about 2 minutes", "20-40 s", "takes 30 seconds"
STATED = re.compile(r"(?:about|roughly|around|takes|within|up to)\s+(?:\d+\s*(?:-|–|to)\s*)?(\d+(?:\.\d+)?)\s*"
                    r"(s|sec|secs|seconds|min|mins|minutes)\b", re.IGNORECASE)


def browser() -> str | None:
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    mac = Path("/Applications/Google Chrome.app/Contents/MacOS/Google Chrome")
    return str(mac) if mac.exists() else None


def install() -> str | None:
    """Install what is missing: Playwright (pinned in constraints.txt) into this environment, and on
    Debian or Ubuntu as root Chromium from apt (DDP_LIB_NO_APT=1 turns that off). The reason it
    could not, or None."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        command = [sys.executable, "-m", "uv", "pip", "install", "--python", sys.executable,
                   "-c", str(ROOT / "constraints.txt"), "playwright"]
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            return "Playwright could not be installed"
    if browser() is None:
        if os.environ.get("DDP_LIB_NO_APT") or shutil.which("apt-get") is None or os.geteuid() != 0:
            return ("no Chromium or Chrome found; install one (Debian: apt-get install chromium) "
                    "or set CHROMIUM=/path/to/it")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, capture_output=True, text=True)
        if done.returncode != 0 or browser() is None:
            return f"apt-get install chromium failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
    return None


def lessons() -> list[str]:
    return sorted(p.name for p in LESSONS.glob("[0-9][0-9]*_*.ipynb"))


def stated_limits(path: Path) -> list[float]:
    """Per code cell, in order: how long it may take, from the markdown cell just before it."""
    cells = json.loads(path.read_text())["cells"]
    limits, before = [], ""
    for cell in cells:
        if cell["cell_type"] == "markdown":
            before = "".join(cell["source"])
            continue
        if cell["cell_type"] != "code":
            continue
        stated = [float(n) * (60 if unit.lower().startswith("min") else 1) for n, unit in STATED.findall(before)]
        limits.append(max(DEFAULT_CELL_LIMIT, STATED_MARGIN * max(stated)) if stated else DEFAULT_CELL_LIMIT)
        before = ""
    return limits


def expected_errors(path: Path) -> list[bool]:
    cells = json.loads(path.read_text())["cells"]
    return ["raises-exception" in c.get("metadata", {}).get("tags", []) for c in cells if c["cell_type"] == "code"]


@dataclass
class Result:
    name: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def machine_slowdown() -> float:
    """How many times slower than idle a busy machine starts processes: the load average over the
    last 5 minutes per CPU, at least 1 (a blank start on an idle machine is held to SILENT_LIMIT)."""
    if not hasattr(os, "getloadavg"):
        return 1.0
    return max(1.0, os.getloadavg()[1] / (os.cpu_count() or 1))


@dataclass
class CellClock:
    """Times of a Run All's code cells, from readings of the page (each cell's prompt and output
    text) a few times a second: when each started, how long it took, how long it showed nothing."""

    started: dict[int, float] = field(default_factory=dict)
    took: dict[int, float] = field(default_factory=dict)
    first_output: dict[int, float] = field(default_factory=dict)  # seconds from its start to its first output

    def observe(self, now: float, cells: list[dict]) -> list[int]:
        """Record one reading; return the cells that show [*]. Queued cells show it too: the one
        executing is the first of them."""
        running = [i for i, cell in enumerate(cells) if "*" in cell["prompt"]]
        if running and running[0] not in self.started:
            self.started[running[0]] = now
        for i, cell in enumerate(cells):
            if i not in self.started:
                continue
            if i not in self.took and re.search(r"\[\d+\]", cell["prompt"]):
                self.took[i] = now - self.started[i]
            if i not in self.first_output and cell["text"].strip():
                self.first_output[i] = now - self.started[i]
        return running

    def blank_starts(self, now: float) -> dict[int, float]:
        """Per cell that started: seconds it ran showing nothing (all of its run if it never showed
        anything; up to ``now`` if it is still running blank)."""
        return {i: self.first_output.get(i, self.took.get(i, now - start)) for i, start in self.started.items()}


# Reads the open notebook from the page: each code cell's prompt ("[*]:", "[3]:", "[ ]:"), whether it
# shows an error output, and the text of its outputs; and the kernel's status and the tab's dirty mark.
STATE_JS = r"""() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const cells = [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')].map(c => ({
    prompt: (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
    stderr: [...c.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
              .map(o => o.textContent).join('\n'),
    text: c.querySelector('.jp-OutputArea') ? c.querySelector('.jp-OutputArea').textContent : '',
  }));
  const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
  const tab = document.querySelector('.lm-TabBar-tab.jp-mod-current');
  return {cells, kernel: status ? status.getAttribute('data-status') : null,
          dirty: !!(tab && tab.classList.contains('jp-mod-dirty'))};
}"""


def wait_state(page, predicate, timeout: float, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = page.evaluate(STATE_JS)
        if state and predicate(state):
            return state
        time.sleep(poll)
    return None


def open_notebook(page, base: str, token: str, name: str) -> dict | None:
    # ?reset: a fresh workspace, so that no tab from the previous lesson is restored beside this one
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}")
    page.wait_for_selector(f"{VISIBLE} .jp-Cell", timeout=120_000)
    # connecting, then idle: the kernel has answered and JupyterLab has applied its language_info
    seen_busy = wait_state(page, lambda s: s["kernel"] in ("connecting", "busy", "starting"), 20)
    del seen_busy
    return wait_state(page, lambda s: s["kernel"] == "idle", 120)


def menu(page, top: str, item: str) -> None:
    page.click(f".lm-MenuBar-itemLabel:text-is('{top}')")
    page.click(f".lm-Menu-itemLabel:text-is('{item}')")


def close_discarding(page) -> None:
    """Close the current tab without saving anything."""
    menu(page, "File", "Close Tab")
    try:
        page.click(".jp-Dialog-button:has-text(\"Discard\"), .jp-Dialog-button:has-text(\"Don't Save\")", timeout=5000)
    except Exception:
        pass  # closed without asking: nothing was modified
    page.wait_for_timeout(500)
    # the kernel goes too, so that its ranks and forkserver are not left for the next lesson
    try:
        menu(page, "Kernel", "Shut Down All Kernels…")
        page.click(".jp-Dialog-button.jp-mod-accept", timeout=5000)
    except Exception:
        pass


def run_lesson(page, base: str, token: str, copy: Path, name: str) -> Result:
    result = Result(name)
    limits, expected = stated_limits(copy / name), expected_errors(copy / name)
    state = open_notebook(page, base, token, name)
    if state is None:
        result.problems.append("the kernel never became idle after opening")
        return result
    if state["dirty"]:
        stored = json.loads((copy / name).read_text())["metadata"].get("language_info", {}).get("version")
        result.problems.append(f"shows as modified right after opening, before anything ran (stored with Python "
                               f"{stored}, the kernel runs {platform.python_version()}: is the lessons' contents "
                               "manager, ddp_lib/lab_contents.py, this Jupyter's? tools/install.py --jupyter-only)")
    # Cleared first, so that a cell counts as done only once it has a new execution count.
    menu(page, "Edit", "Clear Outputs of All Cells")
    menu(page, "Kernel", "Restart Kernel and Run All Cells…")
    page.click(".jp-Dialog-button.jp-mod-accept", timeout=10_000)
    start = time.monotonic()
    clock = CellClock()
    started, took = clock.started, clock.took
    quiet = 0
    while True:
        state = page.evaluate(STATE_JS)
        now = time.monotonic()
        prompts = [c["prompt"] for c in state["cells"]]
        running = clock.observe(now, state["cells"])
        if running and now - started[running[0]] > limits[running[0]] * 2:
            result.problems.append(f"cell {running[0]} still running after {now - started[running[0]]:.0f} s; stopped")
            page.click(f"{VISIBLE} [data-command='notebook:interrupt-kernel']")
            break
        if not running and all(re.search(r"\[\d+\]", p) for p in prompts):
            break
        # Run All stops at a cell that raised: nothing runs any more, and the cells after it keep
        # an empty prompt. Two seconds of quiet polls with the kernel idle mean it has stopped.
        quiet = quiet + 1 if (started and not running and state["kernel"] == "idle") else 0
        if quiet >= 8:
            not_run = [i for i, p in enumerate(prompts) if not re.search(r"\[\d+\]", p)]
            result.problems.append(f"Run All stopped before cell {not_run[0]}: a cell above it raised")
            break
        if now - start > LESSON_LIMIT:
            result.problems.append(f"Run All did not finish within {LESSON_LIMIT:.0f} s")
            break
        time.sleep(0.25)
    total = time.monotonic() - start
    silent_limit = SILENT_LIMIT * machine_slowdown()
    for i, seconds in clock.blank_starts(time.monotonic()).items():
        if seconds > silent_limit:
            result.problems.append(f"cell {i} showed nothing for {seconds:.0f} s, more than {silent_limit:.0f} s")
    for i, seconds in sorted(took.items()):
        if seconds > limits[i]:
            result.problems.append(f"cell {i} took {seconds:.0f} s, more than its {limits[i]:.0f} s")
    for i, cell in enumerate(state["cells"]):
        if TRACEBACK.search(cell["stderr"]) and not (i < len(expected) and expected[i]):
            first = next((ln for ln in cell["text"].splitlines() if re.search(r"Error|Exception", ln)), "")
            result.problems.append(f"cell {i} shows an unexpected error: {first.strip()[:160]}")
    slow = sorted(took.items(), key=lambda kv: -kv[1])[:3]
    result.notes.append(f"Run All {total:.0f} s; slowest cells " + ", ".join(f"{i}: {s:.0f} s" for i, s in slow))
    quietest = max(clock.blank_starts(time.monotonic()).items(), key=lambda kv: kv[1], default=None)
    if quietest:
        result.notes.append(f"longest blank start: cell {quietest[0]}, {quietest[1]:.0f} s")
    if hasattr(os, "getloadavg"):  # times and blank starts stretch with the machine's load
        result.notes.append(f"load average {os.getloadavg()[1]:.1f} over 5 minutes, {os.cpu_count()} CPUs")
    close_discarding(page)
    return result


def _code(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


STOP_NOTEBOOK = {
    "cells": [
        _code("from ddp_lib.launch import launch\nfrom ddp_lib.workers.basic import demo_basic\n"
              "from ddp_lib.workers.faulty_ranks import hang_on_rank"),
        _code("launch(hang_on_rank, 3, kwargs=dict(bad_rank=0), timeout=600)"),
        _code("print(len(launch(demo_basic, 2).results), 'ranks finished')"),
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}
IMPORTS, HANG, LAUNCH = range(3)


def run_cell(page, index: int, timeout: float) -> dict | None:
    """Run one cell (click it, Ctrl+Enter); with a timeout, wait until it has finished."""
    page.click(f"{VISIBLE} .jp-CodeCell .jp-InputArea-editor >> nth={index}")
    page.keyboard.press("Control+Enter")
    if not timeout:
        return None
    page.wait_for_timeout(300)
    return wait_state(page, lambda s: re.search(r"\[\d+\]", s["cells"][index]["prompt"]), timeout)


def rank_processes(server_pid: int) -> list[str]:
    """Processes of the lab's session (the server, its kernels and what they started) other than
    the server, kernels and forkservers: ranks, or their children. Each as "pid command"."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == server_pid:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, ppid, sid = fields[0], int(fields[1]), int(fields[4])
        if state == "Z" or not (sid == server_pid or _descends_from(ppid, server_pid)):
            continue
        # the kernel, its forkserver and multiprocessing's resource tracker stay with the kernel
        if "ipykernel" in cmdline or "resource_tracker" in cmdline or _is_forkserver(cmdline, ppid):
            continue
        found.append(f"{proc.name} {cmdline[:80]}")
    return found


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(20):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _is_forkserver(cmdline: str, ppid: int) -> bool:
    """The kernel's forkserver, not a rank it forked (ranks share its command line): its parent is the kernel."""
    if "forkserver" not in cmdline:
        return False
    try:
        return b"ipykernel" in Path(f"/proc/{ppid}/cmdline").read_bytes()
    except OSError:
        return False


def press_stop(page, base: str, token: str, copy: Path, server_pid: int, first_launch_delay: float) -> Result:
    """Stop a running launch; the cell says so in a few lines, no rank is left, the next launch works."""
    label = "stop during the kernel's first launch" if first_launch_delay < 5 else "stop during a later launch"
    result = Result(label)
    name = f"stop_{int(first_launch_delay * 10)}.ipynb"
    (copy / name).write_text(json.dumps(STOP_NOTEBOOK))
    if open_notebook(page, base, token, name) is None:
        result.problems.append("the kernel never became idle after opening")
        return result
    if run_cell(page, IMPORTS, 120) is None:
        result.problems.append("importing ddp_lib did not finish")
        return result
    if first_launch_delay >= 5:  # warm the forkserver first
        warm = run_cell(page, LAUNCH, 180)
        if warm is None:
            result.problems.append("the warm-up launch did not finish")
        elif FORKSERVER_NOTICE not in warm["cells"][LAUNCH]["text"]:
            result.problems.append("the kernel's first launch did not say it was starting the forkserver")
    run_cell(page, HANG, 0)
    page.wait_for_timeout(first_launch_delay * 1000)
    before_stop = page.evaluate(STATE_JS)["cells"][HANG]["text"]
    page.click(f"{VISIBLE} [data-command='notebook:interrupt-kernel']")
    first = first_launch_delay < 5
    if first and FORKSERVER_NOTICE not in before_stop:
        result.problems.append(f"the kernel's first launch showed nothing about the forkserver within "
                               f"{first_launch_delay:.0f} s: {before_stop[:120]!r}")
    if not first and FORKSERVER_NOTICE in before_stop:
        result.problems.append("a later launch said again that it was starting the forkserver")
    state = wait_state(page, lambda s: "*" not in s["cells"][HANG]["prompt"], 60)
    if state is None:
        result.problems.append("the cell was still running 60 s after the stop button")
        return result
    lines = [ln for ln in state["cells"][HANG]["text"].splitlines() if ln.strip()]
    if len(lines) > 4:
        result.problems.append(f"the stop button printed {len(lines)} lines; first: {lines[0][:120]!r}")
    result.notes.append(f"printed: {' / '.join(ln.strip() for ln in lines)[:200]}")
    page.wait_for_timeout(3000)
    left = rank_processes(server_pid)
    if left:
        result.problems.append(f"{len(left)} process(es) left running after the stop: {'; '.join(left)}")
    state = run_cell(page, LAUNCH, 180)
    if state is None or "2 ranks finished" not in state["cells"][LAUNCH]["text"]:
        result.problems.append("the next launch in the same kernel did not work: "
                               + (state["cells"][LAUNCH]["text"][-200:] if state else "still running after 180 s"))
    elif FORKSERVER_NOTICE in state["cells"][LAUNCH]["text"] and first:
        result.problems.append("the launch after the stop started the forkserver again (the stop killed it)")
    close_discarding(page)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("lessons", nargs="*", help="lesson notebooks (default: every lesson)")
    parser.add_argument("--no-stop", action="store_true", help="skip the stop-button checks")
    parser.add_argument("--install", action="store_true",
                        help="install Playwright and (root, apt) Chromium first when they are missing")
    parser.add_argument("--screenshots", type=Path, help="save a screenshot of each lesson after its Run All")
    args = parser.parse_args(argv)
    names = args.lessons or lessons()
    unknown = [n for n in names if not (LESSONS / n).exists()]
    if unknown:
        parser.error(f"no such lesson: {', '.join(unknown)} (lessons: {', '.join(lessons())})")
    why = install() if args.install else None
    if why:
        print(f"skipped: {why}")
        return 0
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("skipped: Playwright is not installed (make test-browser installs it)")
        return 0
    executable = browser()
    if executable is None:
        print("skipped: no Chromium or Chrome found (Debian: apt-get install chromium; or set CHROMIUM=/path)")
        return 0
    results: list[Result] = []
    token = secrets.token_hex(24)
    with tempfile.TemporaryDirectory(prefix="browser-check-") as tmp:
        copy = Path(tmp) / "notebooks"
        shutil.copytree(LESSONS, copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        for entry in ROOT.iterdir():  # lessons read files beside notebooks/ (../slurm/train.sbatch)
            if entry.name not in ("notebooks", ".git", ".venv"):
                (Path(tmp) / entry.name).symlink_to(entry)
        runtime = Path(tmp) / "runtime"
        runtime.mkdir()
        port = check_lab.free_port()
        base = f"http://127.0.0.1:{port}"
        server = check_lab.start(port, token, str(runtime), runtime / "lab.log",
                                 notebook_dir=str(copy))
        try:
            check_lab.wait_until_ready(server, base, token)
            with sync_playwright() as p:
                chromium = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
                page = chromium.new_page(viewport={"width": 1400, "height": 1000})
                for name in names:
                    print(f"{name}: running", flush=True)
                    result = run_lesson(page, base, token, copy, name)
                    if args.screenshots:
                        args.screenshots.mkdir(parents=True, exist_ok=True)
                        page.screenshot(path=str(args.screenshots / f"{name}.png"))
                    results.append(result)
                    report(result)
                if not args.no_stop:
                    for delay in (2.0, 8.0):
                        results.append(press_stop(page, base, token, copy, server.pid, delay))
                        report(results[-1])
                chromium.close()
        finally:
            check_lab.stop(server)
    failed = sum(1 for r in results if r.problems)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def report(result: Result) -> None:
    verdict = "FAIL" if result.problems else "ok"
    print(f"{verdict} {result.name}" + "".join(f"\n    {p}" for p in result.problems)
          + "".join(f"\n    ({n})" for n in result.notes), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
