"""Every install path selects only versions pinned by constraints.txt, and the CPU-only Linux path no
CUDA package. Resolved, never downloaded: pip's ``--dry-run --report`` for the plain-pip command
tools/install.py runs, and uv's resolver (which reads wheel metadata without fetching the wheels) for
each platform by name. Needs the package index, as installing does."""

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CUDA_PACKAGE = re.compile(r"^(nvidia-.*|cuda-.*|.*-cu\d+|triton)$")
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def load_install():
    spec = importlib.util.spec_from_file_location("install_tool", ROOT / "tools" / "install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


install = load_install()


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path = install.CONSTRAINTS) -> dict[str, set[str]]:
    """Package name -> the versions constraints.txt allows it (torch has one per platform)."""
    found: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        requirement = line.split(";", 1)[0].strip()
        if requirement and not requirement.startswith("#"):
            name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)===?(\S+)", requirement).groups()
            found.setdefault(normal(name), set()).add(version)
    return found


def unpinned(resolved: dict[str, str], allowed: dict[str, set[str]]) -> dict[str, str]:
    return {name: version for name, version in resolved.items() if version not in allowed.get(name, set())}


def uv() -> str:
    path = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if path is None:
        pytest.skip("uv is not installed (it comes with the test extra)")
    return path


def uv_resolve(build: str, platform: str, tmp_path: Path, env: dict[str, str] | None = None,
               python_version: str = HERE) -> dict[str, str]:
    """What ``uv pip install`` as tools/install.py runs it would select for ``platform``, without installing."""
    constraints = install.constraints_for(build, tmp_path)
    options = install.source_options("uv", build, sys.executable)
    out = tmp_path / "resolved.txt"
    command = [uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version", python_version,
               "--python-platform", platform, "-c", str(constraints), "pyproject.toml",
               "--extra", "notebooks", "--extra", "test", *options, "-o", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**install.uv_environment(sys.executable), **(env or {})})
    assert done.returncode == 0, done.stderr
    resolved = {}
    for line in out.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split(";", 1)[0].strip().split("==")
            resolved[normal(name)] = version
    return resolved


def no_cpu_torch_for_this_python() -> str | None:
    """Why torch's CPU build cannot be had for this interpreter here (None where it can): PyTorch's
    CPU index is out of reach, and pip's find-links hold no CPU wheel for this Python version."""
    if install.reachable(install.CPU_INDEX):
        return None
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for location in install.pip_find_links(sys.executable):
        if glob.glob(os.path.join(location.removeprefix("file://"), f"torch-2.13.0+cpu-{tag}-*.whl")):
            return None
    return f"no CPU build of torch for {tag} here (its index is out of reach and pip's find-links hold none)"


def needs_cpu_torch_for_this_python() -> None:
    reason = no_cpu_torch_for_this_python()
    if reason:
        pytest.skip(reason)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resolves this Linux machine's own install")
def test_plain_pip_on_a_cpu_only_linux_machine_selects_cpu_torch_no_cuda_package_and_only_pins(tmp_path):
    needs_cpu_torch_for_this_python()
    options = install.source_options("pip", "cpu", sys.executable)
    command = install.install_command("pip", Path(sys.prefix), install.CONSTRAINTS, options)
    at = command.index("install") + 1
    report = tmp_path / "report.json"
    command[at:at] = ["--dry-run", "--ignore-installed", "--report", str(report)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = {normal(item["metadata"]["name"]): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    assert resolved.pop("ddp-lib")
    assert resolved["torch"] == "2.13.0+cpu"
    assert sorted(filter(CUDA_PACKAGE.match, resolved)) == []
    assert unpinned(resolved, pins()) == {}
    assert len(resolved) > 100  # the whole environment, not only the runtime needs


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU wheel source checked is this machine's")
def test_uv_on_a_cpu_only_linux_machine_selects_cpu_torch_no_cuda_package_and_only_pins(tmp_path):
    needs_cpu_torch_for_this_python()
    resolved = uv_resolve("cpu", "x86_64-manylinux_2_28", tmp_path)
    assert resolved["torch"] == "2.13.0+cpu"
    assert sorted(filter(CUDA_PACKAGE.match, resolved)) == []
    assert unpinned(resolved, pins()) == {}


def test_the_cuda_build_on_linux_takes_pypis_torch_and_pins_every_cuda_package(tmp_path):
    resolved = uv_resolve("cuda", "x86_64-manylinux_2_28", tmp_path)
    assert resolved["torch"] == "2.13.0"
    cuda = sorted(filter(CUDA_PACKAGE.match, resolved))
    assert "triton" in cuda and any(name.startswith("nvidia-") for name in cuda)
    assert unpinned(resolved, pins()) == {}


def test_the_python_floor_resolves_from_its_first_release(tmp_path):
    # requires-python says 3.11: every pin must allow 3.11.0 (Debian 12's Python is 3.11.2).
    project = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'^requires-python = ">=(\d+\.\d+)"$', project, re.MULTILINE).group(1)
    resolved = uv_resolve("cuda", "x86_64-manylinux_2_28", tmp_path, python_version=f"{floor}.0")
    assert unpinned(resolved, pins()) == {}


@pytest.mark.parametrize(("platform", "env"), [("aarch64-apple-darwin", {"MACOSX_DEPLOYMENT_TARGET": "14.0"}),
                                               ("x86_64-pc-windows-msvc", {})], ids=["macos-14-arm64", "windows"])
def test_macos_and_windows_take_pypis_torch_and_only_pins(tmp_path, platform, env):
    resolved = uv_resolve("pypi", platform, tmp_path, env)
    assert resolved["torch"] == "2.13.0"
    assert sorted(filter(CUDA_PACKAGE.match, resolved)) == []
    assert unpinned(resolved, pins()) == {}


def test_the_build_follows_the_machine_and_the_switch():
    assert install.torch_build("auto", "linux", nvidia_gpu=False) == "cpu"
    assert install.torch_build("auto", "linux", nvidia_gpu=True) == "cuda"
    assert install.torch_build("cuda", "linux", nvidia_gpu=False) == "cuda"
    assert install.torch_build("cpu", "linux", nvidia_gpu=True) == "cpu"
    assert install.torch_build("auto", "darwin") == install.torch_build("auto", "win32") == "pypi"
    with pytest.raises(SystemExit, match=r"--torch 'gpu': expected one of auto, cpu, cuda"):
        install.torch_build("gpu", "linux")
    with pytest.raises(SystemExit, match="CUDA build is installed on Linux only"):
        install.torch_build("cuda", "darwin")


def test_the_cpu_index_is_passed_only_when_it_answers():
    # Unreachable, pip would retry it for about 10 s per package (over 15 minutes for this project).
    assert install.source_options("pip", "cpu", sys.executable, cpu_index_reachable=True)[:2] == \
        ["--extra-index-url", install.CPU_INDEX]
    assert install.CPU_INDEX not in install.source_options("pip", "cpu", sys.executable, cpu_index_reachable=False)
    assert install.source_options("pip", "cuda", sys.executable, cpu_index_reachable=True) == []
    assert install.source_options("uv", "cpu", sys.executable, cpu_index_reachable=True)[:2] == \
        ["--torch-backend", "cpu"]
    assert not install.reachable("http://127.0.0.1:9/", timeout=2)  # the discard port: nothing listens


def test_uv_gets_the_find_links_pip_is_configured_with(tmp_path):
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = /somewhere/wheels\n")
    env = {**os.environ, "PIP_CONFIG_FILE": str(config), "PIP_FIND_LINKS": "/elsewhere"}
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tools'); import install; "
                          "print(install.source_options('uv', 'cuda', sys.executable))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert "'--find-links', '/somewhere/wheels'" in out and "'--find-links', '/elsewhere'" in out
