"""Install the project into a virtual environment, with every version taken from constraints.txt.

    python3 tools/install.py [--venv .venv] [--installer uv|pip] [--torch auto|cpu|cuda]
    .venv/bin/python tools/install.py --jupyter-only

``make install`` runs it (``make install INSTALLER=pip TORCH=cuda`` passes the options). It
creates the environment if missing, installs the project with its ``notebooks`` and ``test``
extras, and sets that environment's Jupyter up for the lessons (no news popup; lessons open
unmodified on any Python, see ddp_lib/lab_contents.py). ``--jupyter-only`` does only the last step,
for the Python running it (a venv or conda environment installed without make). The installer is uv (several
times faster than pip on the same install, see docs/install.md), itself pinned and installed by pip;
if uv fails, plain pip installs the same pins.

Which build of torch 2.13.0:

- ``cpu``: the CPU-only build (``2.13.0+cpu``, about 190 MB), from PyTorch's CPU index. What
  ``auto`` picks on Linux without an NVIDIA GPU (no ``nvidia-smi``).
- ``cuda``: PyPI's Linux build, made for CUDA 13.0, with its CUDA libraries (about 2.7 GB in
  all). What ``auto`` picks on Linux when ``nvidia-smi`` is there.
- on macOS and Windows, PyPI's build, the only one (CPU, and Apple's GPU through ``mps``).

The CPU index is passed only if it answers within a few seconds: pip retries an index it
cannot reach for about 10 s for every package, so on a machine that reaches PyPI only (and
finds the CPU wheel through pip's find-links) it would add many minutes. uv does not read
pip's configuration, so pip's find-links and certificate bundle are handed to it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
PROJECT = ".[notebooks,test]"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LINUX_CPU_PIN = 'torch==2.13.0+cpu ; sys_platform == "linux"'
LAB_OVERRIDES = ROOT / "tools" / "jupyterlab_overrides.json"
# Enables ddp_lib.lab_contents, a server extension that makes the lessons open unmodified on any Python.
SERVER_CONFIG = ROOT / "tools" / "jupyter_server_config.d" / "ddp-lib.json"
INSTALLERS = ("uv", "pip")
TORCH_CHOICES = ("auto", "cpu", "cuda")


def torch_build(requested: str, platform: str = sys.platform, nvidia_gpu: bool | None = None) -> str:
    """``"cpu"``, ``"cuda"`` or ``"pypi"`` (macOS, Windows) for ``--torch`` ``requested`` on ``platform``."""
    if requested not in TORCH_CHOICES:
        raise SystemExit(f"--torch {requested!r}: expected one of {', '.join(TORCH_CHOICES)}")
    if not platform.startswith("linux"):
        if requested == "cuda":
            raise SystemExit(f"--torch cuda: the CUDA build is installed on Linux only; on {platform} "
                             "PyPI's torch is the only build")
        return "pypi"
    if requested == "auto":
        has_gpu = shutil.which("nvidia-smi") is not None if nvidia_gpu is None else nvidia_gpu
        return "cuda" if has_gpu else "cpu"
    return requested


def reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether ``url`` answers at all (any HTTP status) within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def constraints_for(build: str, workdir: Path) -> Path:
    """constraints.txt, or for the CUDA build a copy of it that takes PyPI's torch on Linux."""
    if build != "cuda":
        return CONSTRAINTS
    text = CONSTRAINTS.read_text()
    if LINUX_CPU_PIN not in text.splitlines():
        raise SystemExit(f"constraints.txt has no line {LINUX_CPU_PIN!r} to replace for the CUDA build")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "constraints-cuda.txt"
    # `===` matches the version string exactly: PyPI's 2.13.0, never a local build such as 2.13.0+cpu.
    path.write_text(text.replace(LINUX_CPU_PIN, 'torch===2.13.0 ; sys_platform == "linux"'))
    return path


def pip_config(python: str, name: str) -> list[str]:
    """The values of setting ``name`` (e.g. ``find-links``) in pip's configuration, files and environment."""
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("." + name):
            for item in shlex.split(value.strip().strip("'\"")):
                if item not in found:
                    found.append(item)
    return found


def pip_find_links(python: str) -> list[str]:
    """The find-links locations of pip's configuration, as pip would use them."""
    return pip_config(python, "find-links")


def uv_environment(python: str) -> dict[str, str]:
    """The environment for uv: pip's certificate bundle, if pip is configured with one and uv is not."""
    env = dict(os.environ)
    certs = pip_config(python, "cert")
    if certs and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = certs[0]
    return env


def source_options(installer: str, build: str, python: str, cpu_index_reachable: bool | None = None) -> list[str]:
    """Where ``installer`` looks beyond PyPI: PyPI's mirror of the CPU wheels, and (uv) pip's find-links."""
    options: list[str] = []
    if build == "cpu" and (reachable(CPU_INDEX) if cpu_index_reachable is None else cpu_index_reachable):
        # pip: the CPU index beside PyPI (its 2.13.0+cpu sorts above PyPI's 2.13.0). uv: only the
        # torch packages come from PyTorch's index, everything else from PyPI.
        options += ["--extra-index-url", CPU_INDEX] if installer == "pip" else ["--torch-backend", "cpu"]
    if installer == "uv":
        for location in pip_find_links(python):
            options += ["--find-links", location]
    return options


def bin_dir(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin")


def install_command(installer: str, venv: Path, constraints: Path, options: list[str]) -> list[str]:
    """The command that installs the project into ``venv``."""
    python = str(bin_dir(venv) / "python")
    if installer == "pip":
        return [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "-c", str(constraints), "-e", PROJECT, *options]
    # --compile-bytecode: as pip does by default. uv leaves compiling to the first import, and where
    # nothing may write bytecode (PYTHONDONTWRITEBYTECODE, a read-only site-packages) every process
    # compiles torch again: `import torch` costs about twice the CPU time without its .pyc files,
    # paid by every rank, every launch and every test.
    return [str(bin_dir(venv) / "uv"), "pip", "install", "--python", python, "--compile-bytecode",
            "-c", str(constraints), "-e", PROJECT, *options]


def install_lab_settings(prefix: Path) -> list[Path]:
    """Put the project's Jupyter settings where the environment at ``prefix`` reads them: JupyterLab's
    overrides (no news popup) and the server's configuration (the lessons' contents manager)."""
    targets = {LAB_OVERRIDES: prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "ddp-lib.json",
               SERVER_CONFIG: prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "ddp-lib.json"}
    for source, target in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return list(targets.values())


def run(command: list[str], env: dict[str, str] | None = None, check: bool = True) -> int:
    print("+ " + shlex.join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, env=env, check=check).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv")
    parser.add_argument("--installer", choices=INSTALLERS, default="uv")
    parser.add_argument("--torch", default="auto", help="auto (default), cpu or cuda")
    parser.add_argument("--jupyter-only", action="store_true",
                        help="install nothing: only set up the Jupyter of the Python running this")
    args = parser.parse_args(argv)
    if args.jupyter_only:
        for target in install_lab_settings(Path(sys.prefix)):
            print(f"wrote {target}")
        return 0
    build = torch_build(args.torch)
    venv = args.venv if args.venv.is_absolute() else ROOT / args.venv
    python = str(bin_dir(venv) / "python")
    if not Path(python).exists():
        run([sys.executable, "-m", "venv", str(venv)])
    if args.installer == "uv" and not (bin_dir(venv) / "uv").exists():
        run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(CONSTRAINTS), "uv"])
    constraints = constraints_for(build, venv)
    options = source_options(args.installer, build, python)
    print(f"torch: the {build} build; sources beyond PyPI: {shlex.join(options) or 'none'}", flush=True)
    if args.installer == "uv":
        status = run(install_command("uv", venv, constraints, options), env=uv_environment(python), check=False)
        if status != 0:  # plain pip is the path that must always work
            print(f"uv stopped with exit status {status}; installing with pip instead", flush=True)
            run(install_command("pip", venv, constraints, source_options("pip", build, python)))
    else:
        run(install_command("pip", venv, constraints, options))
    install_lab_settings(venv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
