# Run this cell first. On your own machine it does nothing. On Google Colab it fetches this project,
# makes `ddp_lib` importable here and in the processes the lesson starts, and moves to notebooks/.
import os
import subprocess
import sys
from importlib.util import find_spec

REPOSITORY = "https://github.com/OWNER/REPO"  # set from pyproject.toml by tools/add_colab_cell.py


def _on_colab():
    try:
        return find_spec("google.colab") is not None
    except ModuleNotFoundError:  # no `google` package at all
        return False


def _set_up_colab():
    checkout = os.path.expanduser("~/ddp-lib")
    if not os.path.isdir(os.path.join(checkout, "ddp_lib")):
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", REPOSITORY, checkout], check=True)
    # Colab already has torch, numpy and matplotlib. `pip install` of the project could replace
    # Colab's torch, and what pip installs now is not importable in this running kernel anyway:
    # the checkout goes on the path instead, here and for every process started from here.
    missing = [name for name in ("tqdm", "matplotlib", "numpy") if find_spec(name) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if checkout not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([checkout, *filter(None, paths)])
    os.chdir(os.path.join(checkout, "notebooks"))
    import torch

    print(f"Colab: ddp_lib from {REPOSITORY}, working in {os.getcwd()}.")
    print(f"Colab's torch is {torch.__version__}, on {os.cpu_count()} CPU cores; the stored outputs were made "
          "with torch 2.13.0, so yours may differ in detail.")


if _on_colab():
    _set_up_colab()
elif os.environ.get("BINDER_LAUNCH_HOST") or os.environ.get("BINDER_REQUEST"):
    print("Binder: at most 2 GB of memory, so use world_size=2 where a cell lets you choose (4 ranks of the "
          "classic example take about 1.5 GB).")
