"""JupyterLab opens a lesson unmodified on any Python: the notebook it is served carries this Python's version.

When a kernel starts, JupyterLab writes the kernel's ``language_info`` into the open notebook and marks
it modified unless the two are deep-equal (``setMetadata`` in ``@jupyter/ydoc``). ipykernel's
``language_info`` differs between interpreters only in ``version`` (``sys.version.split()[0]``), so a
lesson stored with 3.11.7 opened as modified, before anything ran, on 3.11.2 or 3.13.

``LessonContentsManager`` serves every notebook whose stored ``language_info`` is Python's with the
``version`` of the Python the server runs on, which is the one its ``python3`` kernel runs on. Only
what is sent to the browser changes, never the file; saving writes what the kernel reported anyway.
The package installs ``etc/jupyter/jupyter_server_config.d/ddp-lib.json`` (pyproject.toml's data
files), which makes it the contents manager of the environment's Jupyter server.
"""

from __future__ import annotations

import sys

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

# What ipykernel reports, computed the same way (ipykernel/ipkernel.py, IPythonKernel.language_info).
KERNEL_PYTHON_VERSION = sys.version.split()[0]


def with_kernel_version(notebook: dict, version: str = KERNEL_PYTHON_VERSION) -> dict:
    """``notebook`` (nbformat JSON) with a Python ``language_info.version`` set to ``version``."""
    info = notebook.get("metadata", {}).get("language_info")
    if isinstance(info, dict) and info.get("name") == "python":
        info["version"] = version
    return notebook


class LessonContentsManager(AsyncLargeFileManager):
    """Jupyter server's default contents manager, serving notebooks with this Python's version."""

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if model.get("type") == "notebook" and model.get("content"):
            with_kernel_version(model["content"])
        return model
