"""Lesson 00's checker passes right answers, however they reach the collective, and names what is
wrong in wrong ones, on 2 and 3 ranks: answers that make no process group cannot know the other
ranks' names, and answers that swap them through files or a store run no collective that carries data."""

import pytest

import lesson00_solutions as solutions
from ddp_lib.exercises.lesson00 import check_who_am_i


@pytest.mark.parametrize("answer, world_sizes", [
    (solutions.right, (1, 2, 3)),
    (solutions.imported_by_name_from_the_group, (1, 2, 3)),
    (solutions.through_distributed_c10d, (3,)),
    (solutions.tensors_through_a_process_group_method, (3,)),
    (solutions.one_broadcast_per_rank, (3,)),
    (solutions.summed_rows, (3,)),
    (solutions.tuple_of_names, (2,)),
])
def test_right_answers_pass(answer, world_sizes):
    report = check_who_am_i(answer, world_sizes=world_sizes)
    assert report.passed and str(report).endswith("All checks passed."), str(report)


NO_COLLECTIVE = "FAIL world_size 2: rank 0 has the right names but ran no collective over all ranks"


@pytest.mark.parametrize("answer, line", [
    (solutions.no_group, "FAIL world_size 2: rank 0 returned only its own name"),
    (solutions.reads_callers_frames, "FAIL world_size 2: rank 0 returned only its own name"),
    (solutions.main_everywhere, "FAIL world_size 2: rank 1 returned is_main=True, expected False"),
    (solutions.reversed_order, "FAIL world_size 2: rank 0 has every rank's name but not in rank order"),
    (solutions.hard_coded_world_size, "FAIL world_size 3"),
    (solutions.raises, "FAIL world_size 2: rank 0 raised RuntimeError: not written yet"),
    (solutions.reads_gc, ("FAIL world_size 2: rank 0 returned only its own name",
                          "FAIL world_size 2: rank 0 returned everyone[")),
    (solutions.made_up_names, "FAIL world_size 2: rank 0 returned everyone[1]="),
    (solutions.equal_to_anything, "FAIL world_size 2: rank 0 returned everyone as a _EqualToAnything; expected a list"),
    (solutions.names_in_a_string, "FAIL world_size 2: rank 0 returned everyone as a str; expected a list"),
    (solutions.through_files, NO_COLLECTIVE),
    (solutions.gathers_within_itself, NO_COLLECTIVE),
    (solutions.through_the_store_beside_an_all_reduce, "FAIL world_size 2: rank 0 has the right names but ran no"),
    (solutions.through_the_store_with_forged_collective_inputs,
     "FAIL world_size 2: rank 0 has the right names but ran no"),
    (solutions.through_the_launchers_store, NO_COLLECTIVE),
    (solutions.through_the_groups_store, NO_COLLECTIVE),
    (solutions.forges_the_checkers_records, NO_COLLECTIVE),
])
def test_wrong_answers_are_named(answer, line):
    report = check_who_am_i(answer, world_sizes=(2, 3), timeout=20)
    assert not report.passed
    assert any(got.startswith(line) for got in report.lines), str(report)
