"""Which tests may run at the same time when pytest runs them in parallel (``make test`` runs
``pytest -n 2 --dist loadfile``, pytest-xdist), and in what order.

Each test file, and each notebook, is one unit of work: it runs on one worker, in order (a
notebook's cells share one kernel). Files that use one machine-wide thing share a unit, so that
they never overlap: the tutorial's fixed port 12355, and the network namespaces, daemons and
process counts of the two-host and SLURM checks.

The longest units start first (longest-processing-time order), so that the run does not end with
one worker on a long notebook while the other has nothing left to do. A unit's length is read
from UNIT_SECONDS, measured; a unit not in it is guessed by a rule (see ``unit_seconds``).
``pytest --unit-seconds ...`` prints each unit's measured seconds, as UNIT_SECONDS spells them.

(xdist's own ``xdist_group`` mark does not group anything under pytest 9.2, whose node ids no
longer come from the attribute xdist 3.8 rewrites; so the grouping is done here, in the scheduler.)
"""

from __future__ import annotations

from collections import defaultdict

import pytest

SHARED_UNITS = {
    "tests/test_copy_workers.py": "port-12355",  # plain mp.spawn on the tutorial's default port
    "notebooks/07_failure_lab.ipynb": "port-12355",  # holds 12355 to show the launcher does not need it
    "notebooks/00_start_here.ipynb": "port-12355",  # runs the tutorial's own setup() on 12355, then holds it
    "notebooks/06_torchrun.ipynb": "port-12355",  # its rank dials 12355 and must find nothing listening there
    "tests/test_live_ranks.py": "port-12355",  # steps through the tutorial's own setup() on live ranks
    "tests/test_start_here_port_section.py": "port-12355",  # lesson 00's busy-port section, on 12355
    "tests/test_cluster_hosts.py": "hosts",
    "tests/test_cluster_listen.py": "hosts",
    "tests/test_cluster_slurm.py": "hosts",  # counts every SLURM daemon on the machine
    "notebooks/06b_cluster_lab.ipynb": "hosts",
}

# Seconds each unit takes on the 2-core machine at a load of about 2.5, from the sources noted: only
# their order and rough sizes matter. Most units under 4 s are left out (the rule's guess will do).
# `pytest -n 2 --dist loadfile tests notebooks --nbval ... --unit-seconds` prints them from a run.
UNIT_SECONDS = {
    # the notebooks: each lesson's Run All at load 2.5, which its time under nbval follows
    "notebooks/01_process_groups.ipynb": 26, "notebooks/02_spawn.ipynb": 34,
    "notebooks/03_device_placement.ipynb": 12, "notebooks/04_gradient_sync.ipynb": 26,
    "notebooks/05_training.ipynb": 28, "notebooks/08_performance.ipynb": 16,
    "notebooks/09_training_loop.ipynb": 21, "notebooks/10_beyond_ddp.ipynb": 18,
    # lessons 00 (18 s), 06 (36 s) and 07 (49 s) with test_copy_workers and test_live_ranks (46 s), and
    # lesson 00's port section on its own (about 10 s)
    "port-12355": 159,
    # the test files: their slowest tests' seconds in one run at load 17, scaled by 0.17 to load 2.5
    "tests/test_torchrun.py": 51, "tests/test_template_worker.py": 46, "tests/test_launch_guards.py": 43,
    "tests/test_exercise06.py": 40, "tests/test_launch.py": 36, "tests/test_cheatsheet.py": 23,
    "tests/test_install.py": 23, "tests/test_cli.py": 20, "tests/test_reliability.py": 18,
    "tests/test_launch_deadlines.py": 13, "tests/test_lesson10.py": 12, "tests/test_lessons0203_demos.py": 12,
    "tests/test_colab_cell.py": 11, "tests/test_spawning.py": 11, "tests/test_forkserver_notice.py": 10,
    "tests/test_driver_stdin.py": 9, "tests/test_train.py": 9, "tests/test_no_room.py": 8,
    "tests/test_package.py": 8, "tests/test_bench.py": 7, "tests/test_git_notebooks.py": 5,
    "tests/test_checkpoint_safety.py": 4, "tests/test_forkserver.py": 4,
    "tests/test_notebook_hygiene.py": 3,  # 182 quick checks: the rule would guess 27 s
}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the shared unit its file is in."""
    path = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(path, path)


def unit_seconds(unit: str, tests: int) -> float:
    """How long ``unit`` (of ``tests`` tests) should take: measured, or guessed. A notebook not
    measured yet is guessed as long as a lesson may be (30 s), a test file at 0.15 s a test."""
    if unit in UNIT_SECONDS:
        return UNIT_SECONDS[unit]
    return 30.0 if unit.endswith(".ipynb") else 0.15 * tests


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--unit-seconds", action="store_true",
                     help="print the seconds each unit of work took, for conftest.py's UNIT_SECONDS")


_measured: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _measured[unit_of(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if config.getoption("--unit-seconds") and _measured:
        terminalreporter.write_line("UNIT_SECONDS = {")
        for unit, seconds in sorted(_measured.items(), key=lambda item: -item[1]):
            if seconds >= 2:
                terminalreporter.write_line(f'    "{unit}": {seconds:.0f},')
        terminalreporter.write_line("}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class SharedUnitScheduling(LoadScopeScheduling):
        """xdist's loadfile, with the files of SHARED_UNITS joined into one unit each, and the
        longest unit left handed to each worker that asks for work."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            longest = max(self.workqueue, key=lambda unit: unit_seconds(unit, len(self.workqueue[unit])))
            self.workqueue.move_to_end(longest, last=False)  # xdist hands out the queue's first unit
            super()._assign_work_unit(node)

    return SharedUnitScheduling(config, log)
