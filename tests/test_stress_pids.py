"""A launcher stops its own processes and nothing else, on a machine whose process ids wrap around.

Once a rank has ended, Linux may give its id to a new process, a rank of another job on a busy
machine (ids wrap at /proc/sys/kernel/pid_max, 32768 here, and threads use them too). Here a
process takes a finished rank's id on purpose (root can choose the next id) and must outlive the
launch that stops its job.
"""

from __future__ import annotations

import signal
import time

import pytest
import stress_workers

from ddp_lib import launch
from ddp_lib.launch._processes import OwnProcess

needs_chosen_pids = pytest.mark.skipif(not stress_workers.can_choose_pids(),
                                       reason="choosing the next process id needs root on Linux")


@needs_chosen_pids
# forkserver only: under spawn and fork the launcher is the rank's parent, and its id stays taken until
# the launcher has reaped it, at the end
def test_a_process_given_a_finished_ranks_id_outlives_the_launch(tmp_path):
    results = launch.run_ranks(stress_workers.rank_one_pid_taken, 2, (str(tmp_path),), start_method="forkserver",
                           show_output=False)
    taker = results[0]
    if taker is None:
        pytest.skip("other new processes kept taking the finished rank's id first")
    process = OwnProcess(taker)
    try:
        assert (tmp_path / "rank1.pid").read_text() == str(taker)  # the id rank 1 had
        end = time.monotonic() + 1.0  # a signal sent by the launcher's last act takes a moment to end it
        while time.monotonic() < end:
            assert process.alive(), "the launcher stopped a process that took a finished rank's id"
            time.sleep(0.05)
    finally:
        process.signal(signal.SIGKILL)
        process.close()


STRESS_S = 10.0  # tools/reliability.py `busy` (make reliability) runs the same for minutes


def test_launches_under_load_all_meet_and_stop_only_their_own(tmp_path):
    tally = stress_workers.stress(STRESS_S, str(tmp_path))
    print(tally)
    assert tally.launches >= 4, tally  # the load did not stop the launches from running
    assert tally.failures == [], tally
    assert tally.takers_stopped == [], f"{len(tally.takers_stopped)} of {tally.taken} processes that took a " \
                                       "finished rank's id were stopped by its launcher"
