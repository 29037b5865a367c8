"""The GitHub workflow runs the README's test command on Linux and macOS, with Python 3.11, 3.12 and 3.13,
on every push and pull request, installing as the README says (make, which picks torch's CPU build)."""

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


def test_every_python_from_the_floor_to_313(job):
    (setup,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup["with"]["python-version"] == "${{ matrix.python-version }}"
    assert job["strategy"]["matrix"]["python-version"] == ["3.11", "3.12", "3.13"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^requires-python = ">=3\.11"$', pyproject, re.MULTILINE)  # the first one run is the floor


# The first major version of each action that runs on Node.js 24 (Node.js 20 actions are deprecated).
NODE24 = {"actions/checkout": 5, "actions/setup-python": 6, "actions/cache": 5, "actions/configure-pages": 6,
          "actions/upload-pages-artifact": 5, "actions/deploy-pages": 5}


@pytest.mark.parametrize("path", sorted((ROOT / ".github" / "workflows").glob("*.yml")), ids=lambda p: p.name)
def test_actions_are_current(path):
    for action, major in re.findall(r"uses:\s*([\w-]+/[\w-]+)@v(\d+)", path.read_text()):
        assert action in NODE24 and int(major) >= NODE24[action], f"{action}@v{major}"


def test_builds_the_book_before_the_tests(job):
    runs = [s.get("run", "").strip() for s in job["steps"]]
    assert "make book" in runs and runs.index("make book") < runs.index("make test")


def test_cluster_tests_run_as_root_on_linux(job):
    (linux,) = [s for s in job["steps"] if "test-cluster" in s.get("run", "") and "Linux" in s.get("if", "")
                and "!=" not in s["if"]]
    assert linux["run"].startswith("sudo ")


def test_the_book_is_published_from_main():
    book = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    triggers = book.get("on", book.get(True))
    assert triggers["push"]["branches"] == ["main"]
    steps = [s for job in book["jobs"].values() for s in job["steps"]]
    assert any(s.get("run") == "make book" for s in steps)
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "build/book/html"


def test_runs_the_readme_test_command(job):
    runs = [s["run"] for s in job["steps"] if "run" in s]
    command = readme_test_command()
    assert any(re.search(rf"^\s*{re.escape(command)}\s*$", run, re.MULTILINE) for run in runs), runs


def test_the_install_is_the_makefiles_own(job):
    # No extra index or installer set up in the workflow: `make` does what a learner's machine does.
    text = WORKFLOW.read_text()
    assert "download.pytorch.org" not in "".join(s.get("run", "") for s in job["steps"])
    assert "PIP_EXTRA_INDEX_URL" not in text and "pip install" not in text


def test_runs_every_target_ci_run_runs(job):
    targets = re.findall(r"^make ([\w-]+)\s*$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
    assert {"book", "test", "test-slow", "test-lessons", "test-browser", "test-cluster"} <= set(targets)
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    for target in targets:
        assert re.search(rf"(^|\s)make {re.escape(target)}\s*$", runs, re.MULTILINE), target
