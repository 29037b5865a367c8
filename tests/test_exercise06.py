"""Lesson 06's checker, under real torchrun on three layouts of local nodes (1 then 2 processes,
2 then 1, and 1, 1 and 2 on three nodes; the worked solution on the first two, another right
answer on the third, and the solution's values on all three in this process): right answers pass (the lesson's stub
is refused in notebooks/06_torchrun.ipynb, whose FAIL line nbval compares under make test-lessons). Answers
whose mistake is in what they compute (a layout guessed from ``rank``, a world size written in,
numbers of the wrong type) are judged by the same :func:`find_problems` on what they return under
each layout's torchrun variables, without a torchrun job each."""

from __future__ import annotations

import pkgutil
import textwrap

from ddp_lib.exercises.lesson06 import (
    LAYOUTS,
    check_launch_info,
    check_two_node_restart,
    expected_layout,
    find_problems,
)
from ddp_lib.torchrun import run_nodes


def _write(tmp_path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text("import os\n\n\ndef launch_info(rank, world_size):\n"
                                        + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n")
    return f"{name}:launch_info"


def test_the_worked_solution_passes(tmp_path, monkeypatch):
    from ddp_lib.exercises.solutions.lesson06 import launch_info

    # Under torchrun on the two two-node layouts (one report, a line per job); the three-node job
    # runs in test_a_right_answer_written_differently_passes. The solution's values on every layout:
    assert _problems_on_each_layout(tmp_path, monkeypatch, "ddp_lib.exercises.solutions.lesson06:launch_info") == {
        layout: [] for layout in LAYOUTS}
    report = check_launch_info(launch_info, layouts=LAYOUTS[:2])
    assert report.passed, str(report)
    assert [line.split(",")[0] for line in report.lines] == [
        "PASS on nodes of 1 and 2 processes", "PASS on nodes of 2 and 1 processes"]


def test_a_right_answer_written_differently_passes(tmp_path):
    target = _write(tmp_path, "ex06_other", """
        from os import environ
        names = {"world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
                 "local_world_size": "LOCAL_WORLD_SIZE", "node_rank": "GROUP_RANK"}
        return {key: int(environ.get(name, "-1")) for key, name in names.items()}""")
    # On the three-node layout only (the worked solution runs on all three): it tells apart every key.
    report = check_launch_info(target, directory=str(tmp_path), layouts=((1, 1, 2),))
    assert report.passed and len(report.lines) == 1, str(report)


def _problems_on_each_layout(tmp_path, monkeypatch, target: str) -> dict[tuple[int, ...], list[str]]:
    """What the checker's :func:`find_problems` says of an answer on each layout, the answer called in
    this process once per rank with the variables torchrun gives that rank (RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK). For answers whose mistake is in what they compute:
    the checker's runs under real torchrun are tested above and below."""
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = pkgutil.resolve_name(target)
    found = {}
    for node_sizes in LAYOUTS:
        results = []
        for rank, expected in enumerate(expected_layout(node_sizes)):
            env = {"RANK": rank, "WORLD_SIZE": expected["world_size"], "LOCAL_RANK": expected["local_rank"],
                   "LOCAL_WORLD_SIZE": expected["local_world_size"], "GROUP_RANK": expected["node_rank"]}
            for name, value in env.items():
                monkeypatch.setenv(name, str(value))
            results.append(fn(rank, expected["world_size"]))
        found[node_sizes] = find_problems(results, node_sizes)
    return found


def test_a_layout_guessed_from_rank_fails(tmp_path, monkeypatch):
    # Right on 2 nodes x 2 processes, which is what a guess from rank assumes.
    target = _write(tmp_path, "ex06_guess", """
        return {"world_size": world_size, "local_rank": rank % 2, "local_world_size": 2, "node_rank": rank // 2}""")
    problems = _problems_on_each_layout(tmp_path, monkeypatch, target)
    assert "rank 0: local_world_size is 2, expected 1: read LOCAL_WORLD_SIZE (processes on this node)" in problems[1, 2]
    assert "rank 1: node_rank is 0, expected 1: read GROUP_RANK (this node's rank; torchrun sets no NODE_RANK for " \
           "its workers)" in problems[1, 2]


def test_a_world_size_written_in_fails(tmp_path, monkeypatch):
    target = _write(tmp_path, "ex06_size", """
        return {"world_size": 3, "local_rank": int(os.environ["LOCAL_RANK"]),
                "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]), "node_rank": int(os.environ["GROUP_RANK"])}""")
    problems = _problems_on_each_layout(tmp_path, monkeypatch, target)
    assert problems[1, 2] == problems[2, 1] == []  # right where the size is 3
    assert "rank 0: world_size is 3, expected 4: read WORLD_SIZE (all ranks of all nodes)" in problems[1, 1, 2]


def test_two_nodes_written_in_fail(tmp_path, monkeypatch):
    # node_rank as "not node 0's first process": right on every two-node layout, wrong on the third node.
    target = _write(tmp_path, "ex06_two_nodes", """
        return {"world_size": int(os.environ["WORLD_SIZE"]), "local_rank": int(os.environ["LOCAL_RANK"]),
                "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
                "node_rank": int(os.environ["RANK"] != os.environ["LOCAL_RANK"])}""")
    problems = _problems_on_each_layout(tmp_path, monkeypatch, target)
    assert problems[1, 2] == problems[2, 1] == []
    assert "rank 2: node_rank is 1, expected 2: read GROUP_RANK (this node's rank; torchrun sets no NODE_RANK for " \
           "its workers)" in problems[1, 1, 2]


def test_floats_for_ints_fail(tmp_path, monkeypatch):
    target = _write(tmp_path, "ex06_float", """
        names = (("world_size", "WORLD_SIZE"), ("local_rank", "LOCAL_RANK"),
                 ("local_world_size", "LOCAL_WORLD_SIZE"), ("node_rank", "GROUP_RANK"))
        return {key: float(os.environ[name]) for key, name in names}""")
    problems = _problems_on_each_layout(tmp_path, monkeypatch, target)
    assert problems[1, 2] == ["values must be ints, but rank 0's world_size is 3.0 (float): environment variables "
                              "are strings; convert each with int()"]


def test_a_guess_cannot_be_right_on_both_layouts():
    # Whatever a rank computes from (rank, world_size) is the same in both layouts; the truth is not.
    first, second, third = (expected_layout(sizes) for sizes in LAYOUTS)
    assert len(first) == len(second) and first[1] != second[1]
    assert len(third) != len(first)  # and no world size can be written in
    assert max(info["node_rank"] for info in third) == 2  # nor two nodes


def test_bools_strings_and_wrong_values_are_named():
    good = expected_layout((1, 2))
    answers = [dict(good[0], local_rank=False), dict(good[1], node_rank="1"), dict(good[2], world_size=4)]
    assert find_problems(answers, (1, 2)) == [
        "values must be ints, but rank 0's local_rank is False (bool): environment variables are strings; "
        "convert each with int()",
        "rank 2: world_size is 4, expected 3: read WORLD_SIZE (all ranks of all nodes)",
        "rank 0: local_rank is False, expected 0: read LOCAL_RANK (not RANK)"]


def test_unconverted_strings_and_node_rank_give_one_line_per_mistake():
    # Every value read as text, and the node's rank from NODE_RANK, which torchrun does not set.
    answers = [{key: str(value) for key, value in dict(info, node_rank=0).items()} for info in expected_layout((1, 2))]
    assert find_problems(answers, (1, 2)) == [
        "values must be ints, but rank 0's world_size is '3' (str): environment variables are strings; "
        "convert each with int()",
        "rank 1: node_rank is '0', expected 1: read GROUP_RANK (this node's rank; torchrun sets no NODE_RANK for "
        "its workers)"]


def test_a_failure_names_group_rank_for_node_rank_and_a_start_up_race():
    from ddp_lib.errors import WorkerError
    from ddp_lib.exercises.lesson06 import failure_line

    missing = WorkerError(0, "KeyError", "'NODE_RANK'", failures={0: "KeyError: 'NODE_RANK'"})
    assert failure_line(missing, 1).endswith("; torchrun gives its workers this node's rank as GROUP_RANK "
                                             "(NODE_RANK is torchrun's own option)")
    race = WorkerError(0, "RuntimeError", "Gloo connectFullMesh failed", failures={0: "RuntimeError: connectFullMesh"})
    assert "run the check again" in failure_line(race, 1)


def test_a_worker_module_that_does_not_import_shows_the_ranks_error(tmp_path):
    # The ranks fail before the worker runs, so they write no error file: the end of their stderr says why.
    report = check_launch_info("not_in_this_folder:launch_info", str(tmp_path), layouts=((1, 1),))
    fails = [line for line in str(report).splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and "ModuleNotFoundError: No module named 'not_in_this_folder'" in fails[0]


def test_missing_ranks_and_keys():
    assert find_problems([{}], (1, 1)) == ["1 of 2 ranks returned a result; every rank must return a dict"]
    info = {"world_size": 2, "local_rank": 0, "local_world_size": 1}
    assert find_problems([info, info], (1, 1))[0] == "rank 0: the result lacks node_rank"


def test_the_report_of_a_failure_does_not_depend_on_which_ranks_reported():
    from ddp_lib.errors import WorkerError
    from ddp_lib.exercises.lesson06 import failure_line

    different = WorkerError(0, "NotImplementedError", "write launch_info",
                            failures={1: "ValueError: bad local rank", 0: "NotImplementedError: write launch_info"})
    assert failure_line(different, 1) == "rank 0 raised NotImplementedError: write launch_info"
    # Whichever ranks got to report the same error, the report reads the same.
    for ranks in ([1], [0, 3]):
        same = WorkerError(ranks[0], "NotImplementedError", "write launch_info",
                           failures=dict.fromkeys(ranks, "NotImplementedError: write launch_info"))
        assert failure_line(same, 1) == "NotImplementedError: write launch_info (the same on every rank that reported)"
    assert failure_line(None, -9) == "torchrun exited with code -9"


def test_rank_errors_come_from_each_ranks_folder_with_its_global_rank(tmp_path):
    """A rank that raises leaves its error where torch's error handler puts it (TORCHELASTIC_ERROR_FILE,
    under --log-dir); node 1's local ranks 0 and 1 are global ranks 1 and 2 when node 0 runs one process."""
    (tmp_path / "worker.py").write_text(
        "import os\n\ndef launch_info(rank, world_size):\n"
        "    if os.environ['GROUP_RANK'] == '1':\n        raise ValueError(f'node 1, rank {rank}')\n"
        "    return {}\n")
    job = run_nodes(["-m", "ddp_lib.torchrun", "worker:launch_info"], nnodes=2, nproc_per_node=[1, 2], static=True,
                    env={"PYTHONPATH": str(tmp_path)})
    assert job.returncode != 0
    raised = job.error.failures
    assert set(raised) <= {1, 2} and raised  # torchrun may stop one before it raises
    assert all(message == f"ValueError: node 1, rank {rank}" for rank, message in raised.items())


def test_unconverted_strings_and_node_rank_are_named_under_torchrun(tmp_path):
    target = _write(tmp_path, "ex06_strings", """
        return {"world_size": os.environ["WORLD_SIZE"], "local_rank": os.environ["LOCAL_RANK"],
                "local_world_size": os.environ["LOCAL_WORLD_SIZE"], "node_rank": os.environ.get("NODE_RANK", "0")}""")
    # Two nodes are enough: rank 1 is node 1's first process, and NODE_RANK's "0" is wrong there.
    report = check_launch_info(target, directory=str(tmp_path), layouts=((1, 2),))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 2, str(report)
    assert "environment variables are strings; convert each with int()" in fails[0]
    assert "node_rank is '0', expected 1: read GROUP_RANK" in fails[1] and "sets no NODE_RANK" in fails[1]


def test_the_stub_is_refused_without_starting_torchrun(tmp_path, monkeypatch):
    import ddp_lib.exercises.lesson06 as lesson06

    def stub(rank, world_size):
        raise NotImplementedError("write launch_info")

    def no_torchrun(*args, **kwargs):
        raise AssertionError("the stub must be refused before any torchrun starts")

    monkeypatch.setattr(lesson06, "run_nodes", no_torchrun)
    report = check_launch_info(stub)
    assert not report.passed
    assert report.lines == ["FAIL launch_info is not written yet: it raises NotImplementedError. Replace the raise "
                            "with your code; the check then starts its torchrun jobs"]


def test_an_answer_that_needs_torchrun_variables_is_not_taken_for_the_stub():
    from ddp_lib.exercises.lesson06 import unwritten
    from ddp_lib.exercises.solutions.lesson06 import launch_info

    assert not unwritten(launch_info)  # a KeyError here, outside torchrun: the jobs judge it


# Exercise 3 (a restart on two nodes): its checker reads the files the exercise's cell leaves.
# The logs below follow what train.py prints; the folders follow torchrun's --log-dir layout.
_EPOCHS = "".join(f"epoch {e}: last loss 0.{9 - e}000\n" for e in range(5))


def _ex3(tmp_path, rank0_log: str, attempts: tuple[tuple[str, ...], tuple[str, ...]] = (("attempt_0",),) * 2,
         names: tuple[str, str] = ("ex3_node0.log", "ex3_node1.log"), rank0_on: int = 0):
    for n, (name, folders) in enumerate(zip(names, attempts)):
        (tmp_path / name).write_text(rank0_log if n == rank0_on else "[rank1]: RuntimeError: rank 1 fails in epoch 2\n")
        for folder in folders:
            (tmp_path / f"ex3_node{n}" / "ex3_abc" / folder / "0").mkdir(parents=True)
    return check_two_node_restart(tmp_path)


RESUMED = "attempt 0: starting at epoch 0\n" + _EPOCHS[:2 * 26] + "attempt {}: starting at epoch 2\n" + _EPOCHS[2 * 26:]


def test_ex3_only_the_failed_node_spending_a_restart_passes(tmp_path):
    report = _ex3(tmp_path, RESUMED.format(0), attempts=(("attempt_0",), ("attempt_0", "attempt_1")))
    assert report.passed, str(report)
    assert "n=1 spent a restart" in str(report) and "the other restarted for the new round" in str(report)
    assert "attempt 0 again: this node's agent spent no restart" in str(report) and "outcome B" in str(report)


def test_ex3_both_nodes_spending_a_restart_passes_with_rank_0_on_the_other_torchrun(tmp_path):
    report = _ex3(tmp_path, RESUMED.format(1), attempts=(("attempt_0", "attempt_1"),) * 2, rank0_on=1)
    assert report.passed, str(report)
    assert "ex3_node1.log" in str(report) and "both nodes counted a failure" in str(report)
    assert "outcome B" not in str(report)  # attempt 1 after attempt 0: this node's agent spent a restart


def test_ex3_a_plain_dollar_n_with_a_python_n_is_named(tmp_path):
    report = _ex3(tmp_path, RESUMED.format(0), names=("ex3_node5.log", "ex3_node5.log"))
    assert not report.passed and "`$$n`" in str(report)


def test_ex3_a_kept_checkpoint_is_named(tmp_path):
    report = _ex3(tmp_path, "attempt 0: starting at epoch 5\n")
    assert not report.passed and "delete my_work/checkpoint.pt" in str(report)


def test_ex3_no_failing_epoch_and_no_restart_are_named(tmp_path):
    assert "set FAIL_IN_EPOCH=2" in str(_ex3(tmp_path, "attempt 0: starting at epoch 0\n" + _EPOCHS))
    (tmp_path / "again").mkdir()
    report = _ex3(tmp_path / "again", "attempt 0: starting at epoch 0\n" + _EPOCHS[:2 * 26])
    assert not report.passed and "--max-restarts 1" in str(report)
    assert "before `torchrun`, as the restart cell's command does" in str(report) and "%env" not in str(report)


def test_ex3_not_run_yet_is_said(tmp_path):
    report = check_two_node_restart(tmp_path)
    assert not report.passed and "run exercise 3's cell first" in str(report)
