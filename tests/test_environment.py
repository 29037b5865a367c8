"""The install paths agree: pyproject.toml, constraints.txt and environment.yml."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    found = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def requirement_name(req: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]).lower()


def test_every_requirement_of_the_project_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(map(requirement_name, project["dependencies"]))
    for extra in project["optional-dependencies"].values():
        wanted |= set(map(requirement_name, extra))
    assert wanted - set(pins()) == set()


def test_torch_is_pinned_to_the_release_the_notebooks_were_executed_with():
    # A range would pull a multi-GB CUDA build where the CPU wheel is what is wanted.
    assert pins()["torch"] == "2.13.0"


def test_the_runtime_needs_only_torch_and_numpy():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(map(requirement_name, project["dependencies"])) == ["numpy", "torch"]


def test_environment_yml_installs_the_project_with_the_same_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip_lines = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-c constraints.txt" in pip_lines
    editable = next(line for line in pip_lines if line.startswith("-e "))
    extras = set(re.search(r"\[(.*)\]", editable).group(1).split(","))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extras >= {"notebooks", "test"} and extras <= set(project["optional-dependencies"])


def test_makefile_installs_from_the_same_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in makefile and '-e ".[notebooks,test]"' in makefile
