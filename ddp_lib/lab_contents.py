"""JupyterLab opens a lesson unmodified on any Python: the notebook it is served carries this Python's version.

When a kernel starts, JupyterLab writes the kernel's ``language_info`` into the open notebook and marks
it modified unless the two are deep-equal (``setMetadata`` in ``@jupyter/ydoc``). ipykernel's
``language_info`` differs between interpreters only in ``version`` (``sys.version.split()[0]``), so a
lesson stored with 3.11.7 opened as modified, before anything ran, on 3.11.2 or 3.13.

``LessonContentsManager`` serves every notebook whose stored ``language_info`` is Python's with the
``version`` of the Python the server runs on, which is the one its ``python3`` kernel runs on. Only
what is sent to the browser changes, never the file; saving writes what the kernel reported anyway.
This module is a Jupyter server extension that makes it the server's contents manager; tools/install.py
enables it in an environment (``etc/jupyter/jupyter_server_config.d/ddp-lib.json``).
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


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "ddp_lib.lab_contents"}]


def _link_jupyter_server_extension(serverapp) -> None:
    # Extensions are linked before the server makes its contents manager (ServerApp.initialize), and
    # this is where an extension may change the server's configuration. One configured by the user
    # (jupytext's, say) is kept: lessons then open as modified on another Python, nothing worse.
    if serverapp.contents_manager_class is AsyncLargeFileManager:
        serverapp.contents_manager_class = LessonContentsManager
    else:
        serverapp.log.warning("ddp_lib.lab_contents: keeping the configured contents manager %s",
                              serverapp.contents_manager_class)


def _load_jupyter_server_extension(serverapp) -> None:
    serverapp.log.info("ddp_lib.lab_contents: lessons are served with Python %s", KERNEL_PYTHON_VERSION)
