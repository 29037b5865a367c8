"""ddp_lib.mp.labelled_spawn takes args as torch does: any iterable, since each rank runs fn(i, *args)."""

import launcher_workers
import pytest

import ddp_lib.mp as mp
from ddp_lib.errors import LaunchInputError


def test_a_list_of_args_works_as_under_torch():
    assert mp.labelled_spawn(launcher_workers.mp_rank, args=[10], nprocs=2) == [0, 10]


def test_a_non_iterable_args_is_refused_with_the_comma_hint():
    with pytest.raises(LaunchInputError, match=r"got int 4; \(x\) is just x in Python, write args=\(4,\)$"):
        mp.labelled_spawn(launcher_workers.mp_rank, args=(4), nprocs=2)  # noqa: UP034 (the trap itself)
