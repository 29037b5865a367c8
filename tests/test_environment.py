"""The install paths agree: pyproject.toml, constraints.txt and environment.yml."""

import importlib.util
import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    """Package name -> pinned version; for a package pinned per platform, the last line's."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    found = {}
    for line in lines:
        requirement = line.split(";", 1)[0].strip()
        if requirement and not requirement.startswith("#"):
            name, version = requirement.split("==")
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
    # A range would pull a multi-GB CUDA build where the CPU wheel is what is wanted; on Linux the
    # pin names the CPU build itself, so an install that cannot find it fails instead.
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    torch = [line for line in lines if line.startswith("torch")]
    assert torch == ['torch==2.13.0+cpu ; sys_platform == "linux"', 'torch==2.13.0 ; sys_platform != "linux"']


def test_the_runtime_needs_only_torch_numpy_and_tqdm():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(map(requirement_name, project["dependencies"])) == ["numpy", "torch", "tqdm"]


def test_environment_yml_installs_the_project_with_the_same_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    # Exactly the Python the stored outputs were made with, not any 3.11.x.
    lesson = json.loads(sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))[0].read_text())
    assert f"python={lesson['metadata']['language_info']['version']}" in deps
    pip_lines = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-c constraints.txt" in pip_lines
    # Linux's pin is the CPU build, which only PyTorch's CPU index has (Binder builds from here too).
    assert f"--extra-index-url {install_tool().CPU_INDEX}" in pip_lines
    editable = next(line for line in pip_lines if line.startswith("-e "))
    extras = set(re.search(r"\[(.*)\]", editable).group(1).split(","))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extras >= {"notebooks", "test"} and extras <= set(project["optional-dependencies"])


def install_tool():
    spec = importlib.util.spec_from_file_location("install_tool", ROOT / "tools" / "install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_makefile_installs_from_the_same_constraints_and_extras():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(INSTALLED\):.*\n\t(.*)$", makefile, re.MULTILINE).group(1)
    assert recipe.startswith("$(PYTHON) tools/install.py ")
    tool = install_tool()
    assert tool.CONSTRAINTS == ROOT / "constraints.txt" and tool.PROJECT == ".[notebooks,test]"
    for installer in tool.INSTALLERS:
        command = tool.install_command(installer, ROOT / ".venv", tool.CONSTRAINTS, [])
        assert ["-c", str(ROOT / "constraints.txt"), "-e", ".[notebooks,test]"] == command[-4:]


def test_the_python_floor_is_the_same_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "Python 3.11" in quick_start and "3.11.0" in quick_start
