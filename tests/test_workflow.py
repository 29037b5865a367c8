"""The GitHub workflow runs the README's test command on Linux and macOS, Python 3.11, on every push
and pull request, with torch's CPU wheel on Linux."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "test.yml"


def readme_test_command() -> str:
    """The test command of the README's quick start: the line of its first code block that runs tests."""
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh|console)?\n(.*?)```", quick_start, re.DOTALL).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return next(c for c in commands if re.search(r"\btest\b", c))


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def job(workflow) -> dict:
    (only,) = workflow["jobs"].values()
    return only


def test_the_readme_names_make_test():
    assert readme_test_command() == "make test"


def test_runs_on_every_push_and_pull_request(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert {"push", "pull_request"} <= set(triggers)
    for event in ("push", "pull_request"):
        assert not (triggers[event] or {}).get("branches") and not (triggers[event] or {}).get("paths"), \
            f"{event} is filtered; every push and pull request should run the tests"


def test_runs_on_linux_and_macos(job):
    assert job["runs-on"] == "${{ matrix.os }}"
    assert set(job["strategy"]["matrix"]["os"]) == {"ubuntu-latest", "macos-latest"}
    assert job["strategy"].get("fail-fast") is False  # one OS failing must not hide the other's result


def test_python_311_with_pip_downloads_cached_by_the_pins(job):
    (setup,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert str(setup["with"]["python-version"]) == "3.11"
    assert setup["with"]["cache"] == "pip"
    assert set(setup["with"]["cache-dependency-path"].split()) == {"constraints.txt", "pyproject.toml"}


def test_runs_the_readme_test_command(job):
    runs = [s["run"] for s in job["steps"] if "run" in s]
    command = readme_test_command()
    assert any(re.search(rf"^\s*{re.escape(command)}\s*$", run, re.MULTILINE) for run in runs), runs


def test_linux_takes_the_cpu_wheel_of_the_pinned_torch(job):
    pins = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", pins, re.MULTILINE)  # a bare version matches 2.13.0+cpu too
    steps = [s for s in job["steps"] if "download.pytorch.org/whl/cpu" in s.get("run", "")]
    assert len(steps) == 1 and steps[0]["if"] == "runner.os == 'Linux'"
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in steps[0]["run"]
    assert "GITHUB_ENV" in steps[0]["run"]
    order = [s.get("run", "") for s in job["steps"]]
    assert order.index(steps[0]["run"]) < next(i for i, r in enumerate(order) if "make test" in r)
