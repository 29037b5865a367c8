"""Which tests may run at the same time when pytest runs them in parallel (``make test`` runs
``pytest -n 2 --dist loadgroup``, pytest-xdist).

Each test file, and each notebook, is one group: it runs on one worker, in order (a notebook's
cells share one kernel). Files that use one machine-wide thing share a group, so that they never
overlap: the tutorial's fixed port 12355, and the network namespaces, daemons and process counts
of the two-host and SLURM checks.
"""

from __future__ import annotations

import pytest

SHARED_GROUPS = {
    "tests/test_copy_workers.py": "port-12355",  # plain mp.spawn on the tutorial's default port
    "notebooks/07_failure_lab.ipynb": "port-12355",  # holds 12355 to show the launcher does not need it
    "tests/test_cluster_hosts.py": "hosts",
    "tests/test_cluster_listen.py": "hosts",
    "tests/test_cluster_slurm.py": "hosts",  # counts every SLURM daemon on the machine
    "notebooks/06_torchrun.ipynb": "hosts",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix()
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(path, path)))
