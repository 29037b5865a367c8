"""Check that ``make lab`` works: start JupyterLab headless, check it serves the notebooks, stop it.

    python tools/check_lab.py        # exit status 0 and one line per check when all is well

JupyterLab gets the options ``make lab`` uses (``make lab-args`` prints them), plus what a
headless check needs: no browser, a free port on 127.0.0.1, a random token, and a private
runtime directory and user-settings directory. Then ``GET /api/contents/`` must list every
``notebooks/NN_*.ipynb``, ``GET /lab`` must answer 200, ``GET /`` must lead to lesson 00, and
JupyterLab's settings must say never to fetch Jupyter news (no popup asking). The server is
stopped afterwards whatever happened, and ``main`` fails if it is still running.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 120.0  # seconds; a cold start on a busy 2-core machine takes several
STOP_TIMEOUT = 20.0
START = "notebooks/00_start_here.ipynb"  # make lab serves the repository, so lessons link docs/
NOTIFICATIONS = "@jupyterlab/apputils-extension:notification"


def lab_args() -> list[str]:
    """The options ``make lab`` passes to ``jupyter lab``, as make expands them."""
    if shutil.which("make") is None:  # e.g. Windows without make: the line as written, minus make functions
        line = re.search(r"^LAB_ARGS\s*:?=(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
        return shlex.split(re.sub(r"\$\(.*\)", "", line))
    out = subprocess.run(["make", "--no-print-directory", "-s", "lab-args"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return shlex.split(out.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, token: str) -> tuple[int, bytes]:
    return fetch(url, token)[:2]


def fetch(url: str, token: str) -> tuple[int, bytes, str]:
    """Status, body and the address answered from, after redirects."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), response.url
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.url


def start(port: int, token: str, runtime_dir: str, log: Path, notebook_dir: str | None = None) -> subprocess.Popen:
    """``jupyter lab`` with ``make lab``'s options (and another notebook directory, if given)."""
    args = lab_args()
    if notebook_dir is not None:
        args = [a for a in args if not a.startswith("--notebook-dir=")] + [f"--notebook-dir={notebook_dir}"]
    command = [sys.executable, "-m", "jupyter", "lab", *args,
               "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}"]
    if not any(arg.startswith("--ip=") for arg in command):
        command.append("--ip=127.0.0.1")
    # Private user settings too: what is checked is the lab as installed, not this user's own choices.
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": runtime_dir, "PYTHONUNBUFFERED": "1",
           "JUPYTERLAB_SETTINGS_DIR": os.path.join(runtime_dir, "user-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": os.path.join(runtime_dir, "workspaces")}
    # Output to a file (a pipe nobody reads could fill and block the server); its own session,
    # so that stop() ends the server and anything it started, and only that.
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=os.name == "posix")


def stop(server: subprocess.Popen) -> None:
    """SIGTERM (jupyter_server shuts down cleanly on it), then SIGKILL; the whole session on POSIX."""
    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (getattr(signal, "SIGKILL", signal.SIGTERM), 5.0)):
        if server.poll() is not None:
            break
        try:
            if os.name == "posix":
                os.killpg(server.pid, sig)
            else:
                server.terminate()
        except ProcessLookupError:
            break
        try:
            server.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    if os.name == "posix":
        try:  # anything the server started in its session (kernels, terminals) goes too
            os.killpg(server.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def wait_until_ready(server: subprocess.Popen, base: str, token: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with status {server.returncode} before serving")
        try:
            if get(f"{base}/api/status", token)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"jupyter lab did not answer on {base} within {START_TIMEOUT:.0f} s")


def check(base: str, token: str) -> list[str]:
    """The checks, one line each; raises AssertionError on the first that fails."""
    expected = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    status, body = get(f"{base}/api/contents/notebooks", token)
    assert status == 200, f"GET /api/contents/notebooks answered {status}"
    listed = sorted(item["name"] for item in json.loads(body)["content"] if item["type"] == "notebook")
    missing = sorted(set(expected) - set(listed))
    assert expected and not missing, \
        f"GET /api/contents/notebooks does not list {missing or 'any NN_*.ipynb'}; it lists {listed}"
    status, _ = get(f"{base}/api/contents/docs/glossary.md", token)  # what the lessons' term links open
    assert status == 200, \
        f"GET /api/contents/docs/glossary.md answered {status}: the lessons' glossary links would open nothing"
    status, body = get(f"{base}/lab", token)
    assert status == 200, f"GET /lab answered {status}"
    assert b"<html" in body.lower() or b"<!doctype html" in body.lower(), "GET /lab did not answer a page"
    status, _ = get(f"{base}/api/contents/notebooks", "wrong-" + token)
    assert status == 403, f"GET /api/contents/notebooks with a wrong token answered {status}, not 403"
    status, _, landed = fetch(f"{base}/", token)
    assert status == 200 and landed.endswith(f"/lab/tree/{START}"), f"GET / led to {landed} ({status}), not {START}"
    status, body = get(f"{base}/lab/api/settings/{NOTIFICATIONS}", token)
    assert status == 200, f"GET /lab/api/settings/{NOTIFICATIONS} answered {status}"
    news = news_setting(json.loads(body))
    assert news == "false", f"fetchNews is {news!r}: JupyterLab will ask about Jupyter news; expected 'false'"
    return [f"GET /api/contents/notebooks lists the {len(expected)} lessons: {', '.join(expected)}",
            "GET /api/contents/docs/glossary.md answers 200: the lessons' links to docs/ open",
            "GET /lab answers 200 with the JupyterLab page",
            "a wrong token is refused (403)",
            f"GET / opens {START}",
            "fetchNews is 'false': no popup about Jupyter news"]


def news_setting(plugin: dict) -> object:
    """The fetchNews value JupyterLab's front end uses: the user's own, else the default after overrides."""
    return plugin.get("settings", {}).get("fetchNews", plugin["schema"]["properties"]["fetchNews"].get("default"))


def main() -> int:
    token = secrets.token_hex(24)
    with tempfile.TemporaryDirectory(prefix="check-lab-") as runtime_dir:
        log = Path(runtime_dir) / "lab.log"
        for attempt in range(3):  # another program may take the free port before the server does
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            server = start(port, token, runtime_dir, log)
            try:
                wait_until_ready(server, base, token)
                lines = check(base, token)
                break
            except RuntimeError:
                if attempt == 2 or "address already in use" not in log.read_text(errors="replace").lower():
                    print(log.read_text(errors="replace"), file=sys.stderr)
                    raise
            except AssertionError:
                print(log.read_text(errors="replace"), file=sys.stderr)
                raise
            finally:
                stop(server)
        assert server.poll() is not None, "jupyter lab is still running"
        text = log.read_text(errors="replace")
    print(f"jupyter lab {' '.join(lab_args())} served on 127.0.0.1:{port}, then stopped:")
    for line in lines:
        print("  " + line)
    if "Traceback" in text:  # a clean start and stop logs none
        print(text, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
