"""Which tests may run at the same time when pytest runs them in parallel (``make test`` runs
``pytest -n 2 --dist loadfile``, pytest-xdist).

Each test file, and each notebook, is one unit of work: it runs on one worker, in order (a
notebook's cells share one kernel). Files that use one machine-wide thing share a unit, so that
they never overlap: the tutorial's fixed port 12355, and the network namespaces, daemons and
process counts of the two-host and SLURM checks.

(xdist's own ``xdist_group`` mark does not group anything under pytest 9.2, whose node ids no
longer come from the attribute xdist 3.8 rewrites; so the grouping is done here, in the scheduler.)
"""

from __future__ import annotations

import pytest

SHARED_UNITS = {
    "tests/test_copy_workers.py": "port-12355",  # plain mp.spawn on the tutorial's default port
    "notebooks/07_failure_lab.ipynb": "port-12355",  # holds 12355 to show the launcher does not need it
    "notebooks/00_start_here.ipynb": "port-12355",  # runs the tutorial's own setup() on 12355, then holds it
    "tests/test_live_ranks.py": "port-12355",  # steps through the tutorial's own setup() on live ranks
    "tests/test_cluster_hosts.py": "hosts",
    "tests/test_cluster_listen.py": "hosts",
    "tests/test_cluster_slurm.py": "hosts",  # counts every SLURM daemon on the machine
    "notebooks/06b_cluster_lab.ipynb": "hosts",
}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the shared unit its file is in."""
    path = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(path, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class SharedUnitScheduling(LoadScopeScheduling):
        """xdist's loadfile, with the files of SHARED_UNITS joined into one unit each."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return SharedUnitScheduling(config, log)
