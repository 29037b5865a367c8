"""ddp_lib.demos.lost_host: a frozen rank is noticed only at the group's timeout, as a timeout."""

import pytest

from ddp_lib import run_ranks
from ddp_lib.demos import lost_host
from ddp_lib.launch import WorkerError
from ddp_lib.workers import faulty_ranks


def test_a_frozen_rank_makes_the_survivor_wait_its_whole_timeout(tmp_path):
    with pytest.raises(WorkerError):
        run_ranks(lost_host.freeze_in_collective, 2, kwargs=dict(record_dir=str(tmp_path), timeout_s=1.0),
                  show_output=False)
    records = faulty_ranks.read_records(str(tmp_path))
    waited = records[0]["failed_at"] - records[0]["entered_at"]  # from rank 0's own call, which may start
    assert 1.0 <= waited < 30, waited                             # a little before rank 1 records its freeze
    assert records[0]["entered_at"] - records[1]["froze_at"] < 1.0
    assert "Timed out" in records[0]["error"]
