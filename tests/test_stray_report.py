"""ddp_lib.demos.stray_report, as lesson 07's diagnosis exercise runs it: with real ranks."""

import pytest

from ddp_lib.demos import stray_report
from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks


def test_rank_0_fails_and_its_traceback_names_the_function_with_the_stray_collective():
    with pytest.raises(WorkerError) as caught:
        run_ranks(stray_report.train, 3, show_output=False)
    assert caught.value.rank == 0
    assert "_best_so_far" in caught.value.worker_traceback
    assert "_report" in caught.value.worker_traceback
