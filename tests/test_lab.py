"""`make lab` works: JupyterLab starts with the Makefile's options, serves the lessons, opens on lesson 00
without asking about Jupyter news, and stops."""

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_make_lab_and_the_check_use_the_same_options():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lab:.*\n\t(.*)$", makefile, re.MULTILINE).group(1)
    assert "/bin/jupyter lab " in recipe and recipe.endswith("$(LAB_ARGS))")  # LAB_IP may replace its --ip
    assert "lab-args" in (ROOT / "tools" / "check_lab.py").read_text()


def test_jupyterlab_serves_the_notebooks_and_stops():
    out = subprocess.run([sys.executable, "tools/check_lab.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lessons = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    assert f"lists the {len(lessons)} lessons: {', '.join(lessons)}" in out.stdout
    assert "GET /lab answers 200" in out.stdout
    assert "GET / opens notebooks/00_start_here.ipynb" in out.stdout
    assert "GET /api/contents/docs/glossary.md answers 200" in out.stdout
    assert "fetchNews is 'false': no popup about Jupyter news" in out.stdout
    port = int(re.search(r"served on 127\.0\.0\.1:(\d+), then stopped", out.stdout).group(1))
    with socket.socket() as s:  # nothing listens there any more
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_the_install_puts_the_news_setting_where_jupyterlab_reads_it():
    install = (ROOT / "tools" / "install.py").read_text()
    assert "jupyterlab_overrides.json" in install and '"overrides.d"' in install
    overrides = json.loads((ROOT / "tools" / "jupyterlab_overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
