# Run this cell first. On your own machine it does nothing. On Google Colab it fetches this project,
# makes `ddp_lib` importable here and in the processes the lesson starts, and moves to notebooks/.
REPOSITORY = "https://github.com/OWNER/REPO"  # set from pyproject.toml by tools/add_colab_cell.py


def _set_up_hosted_notebook(repository):
    # Imports stay inside, under names of their own: the lesson's first cell imports what it uses.
    import os as _os
    import subprocess as _subprocess
    import sys as _sys
    from importlib.util import find_spec as _find_spec

    try:
        on_colab = _find_spec("google.colab") is not None
    except ModuleNotFoundError:  # no `google` package at all
        on_colab = False
    if not on_colab:
        if _os.environ.get("BINDER_LAUNCH_HOST") or _os.environ.get("BINDER_REQUEST"):
            print("Binder: at most 2 GB of memory, so use world_size=2 where a cell lets you choose "
                  "(4 ranks of the classic example take about 1.5 GB).")
        return
    checkout = _os.path.expanduser("~/ddp-lib")
    if not _os.path.isdir(_os.path.join(checkout, "ddp_lib")):
        _subprocess.run(["git", "clone", "--quiet", "--depth", "1", repository, checkout], check=True)
    # Colab already has torch, numpy and matplotlib. `pip install` of the project could replace
    # Colab's torch, and what pip installs now is not importable in this running kernel anyway:
    # the checkout goes on the path instead, here and for every process started from here.
    missing = [name for name in ("tqdm", "matplotlib", "numpy") if _find_spec(name) is None]
    if missing:
        _subprocess.run([_sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
    if checkout not in _sys.path:
        _sys.path.insert(0, checkout)
    paths = _os.environ.get("PYTHONPATH", "").split(_os.pathsep)
    if checkout not in paths:
        _os.environ["PYTHONPATH"] = _os.pathsep.join([checkout, *filter(None, paths)])
    _os.chdir(_os.path.join(checkout, "notebooks"))
    import torch as _torch

    print(f"Colab: ddp_lib from {repository}, working in {_os.getcwd()}.")
    print(f"Colab's torch is {_torch.__version__}, on {_os.cpu_count()} CPU cores; the stored outputs were made "
          "with torch 2.13.0, so yours may differ in detail.")
    print("What you write here, notebooks/my_work/ included, lasts as long as this runtime: mount Google Drive "
          "to keep it (docs/install.md, Colab and Binder).")


_set_up_hosted_notebook(REPOSITORY)
