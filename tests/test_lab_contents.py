"""Every lesson opens unmodified in JupyterLab, on any Python: what the server sends equals what the
kernel reports (JupyterLab compares the two deep-equal, see ddp_lib/lab_contents.py)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("jupyter_server", reason="the notebooks extra is not installed")
from ipykernel.ipkernel import IPythonKernel  # noqa: E402

from ddp_lib.lab_contents import LessonContentsManager, with_kernel_version  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
sys.path.insert(0, str(ROOT / "tools"))
import install  # noqa: E402


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.name)
def test_the_server_sends_each_lesson_with_what_this_kernel_reports(notebook):
    manager = LessonContentsManager(root_dir=str(notebook.parent))
    model = asyncio.run(manager.get(notebook.name, content=True, type="notebook"))
    assert model["content"]["metadata"]["language_info"] == IPythonKernel.language_info
    stored = json.loads(notebook.read_text())["metadata"]["language_info"]
    assert stored != {} and model["content"]["metadata"]["language_info"]["name"] == stored["name"]


@pytest.mark.parametrize("version", ["3.11.2", "3.12.3", "3.13.1"])
@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.name)
def test_only_the_version_differs_between_pythons_and_it_is_filled_in(notebook, version):
    """ipykernel's language_info on another Python differs in ``version`` alone (it reads
    ``sys.version``); the stored lesson, as served there, equals it."""
    other_kernel = dict(IPythonKernel.language_info, version=version)
    served = with_kernel_version(json.loads(notebook.read_text()), version)
    assert served["metadata"]["language_info"] == other_kernel


def test_a_notebook_of_another_language_is_served_unchanged():
    notebook = {"metadata": {"language_info": {"name": "R", "version": "4.4.1"}}, "cells": []}
    assert with_kernel_version(copy.deepcopy(notebook), "3.13.1") == notebook


def test_a_directory_is_still_listed(tmp_path):
    (tmp_path / "lesson.ipynb").write_text((LESSONS[0]).read_text())
    listing = asyncio.run(LessonContentsManager(root_dir=str(tmp_path)).get("", content=True))
    assert [entry["name"] for entry in listing["content"]] == ["lesson.ipynb"]


def test_the_install_enables_the_extension(tmp_path):
    written = install.install_lab_settings(tmp_path)
    server = json.loads((tmp_path / "etc/jupyter/jupyter_server_config.d/ddp-lib.json").read_text())
    assert server["ServerApp"]["jpserver_extensions"] == {"ddp_lib.lab_contents": True}
    assert (tmp_path / "share/jupyter/lab/settings/overrides.d/ddp-lib.json") in written


def test_a_server_with_the_installed_settings_serves_this_pythons_version(tmp_path):
    """A real Jupyter server (extensions, then its contents manager), its configuration read from where
    tools/install.py writes it."""
    install.install_lab_settings(tmp_path)
    port, token = free_port(), "lab-contents-test"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "etc" / "jupyter"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    command = [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT / 'notebooks'}", "--allow-root"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/api/contents/{LESSONS[0].name}?token={token}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    model = json.load(response)
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.5)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=60)
    assert "ddp_lib.lab_contents | extension was successfully loaded" in stderr, stderr[-2000:]
    assert model["content"]["metadata"]["language_info"] == IPythonKernel.language_info


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
