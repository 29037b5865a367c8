"""The files every project has agree with pyproject.toml and the package: the licence, how to cite it,
and a changelog with the current version."""

import json
import re
import tomllib
from pathlib import Path

import yaml

import ddp_lib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_licence_file_is_the_licence_pyproject_names():
    assert PROJECT["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Permission is hereby granted, free of charge" in text
    assert re.search(r"^Copyright \(c\) \d{4} \S", text, re.MULTILINE)


def test_the_citation_names_this_version_and_licence():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors"):  # what the format requires
        assert citation.get(key), key
    assert citation["version"] == ddp_lib.__version__
    assert citation["license"] == PROJECT["license"]["text"]


def test_the_changelog_has_the_current_version():
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert any(h.split()[0] == ddp_lib.__version__ for h in headings[1:]), headings


def test_the_devcontainer_has_its_own_venv_and_is_not_root():
    # devcontainer.json is JSON with // comments
    text = "\n".join(line for line in (ROOT / ".devcontainer" / "devcontainer.json").read_text().splitlines()
                     if not line.lstrip().startswith("//"))
    config = json.loads(text)
    assert config["remoteUser"] not in ("root", None) and config.get("updateRemoteUserUID", True)
    venv_mounts = [m for m in config["mounts"] if "target=${containerWorkspaceFolder}/.venv" in m]
    assert venv_mounts and "type=volume" in venv_mounts[0]
