"""%%exercise writes an exercise file like %%writefile, but never overwrites a learner's edits made
outside the cell."""

import pytest

from ddp_lib.exercises.stubs import write_stub

STUB = "def f(rank, world_size):\n    return None\n"


def test_writes_a_new_file_and_rewrites_it_while_only_the_cell_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert write_stub("my_work/a.py", STUB) == "Wrote my_work/a.py."
    assert (tmp_path / "my_work/a.py").read_text() == STUB
    assert write_stub("my_work/a.py", STUB) == "Wrote my_work/a.py."  # a re-run reads the same
    edited_cell = STUB.replace("None", "rank")
    assert write_stub("my_work/a.py", edited_cell) == ("Wrote my_work/a.py. "
                                                       "Its previous text is in my_work/a.py.previous.")
    assert (tmp_path / "my_work/a.py").read_text() == edited_cell


def test_an_answer_typed_in_the_cell_survives_a_fresh_copy_running_the_stub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    answer = STUB.replace("None", "rank")
    write_stub("my_work/a.py", answer)  # the learner typed the answer into the cell
    said = write_stub("my_work/a.py", STUB)  # later, a clean copy of the lesson runs the stub again
    assert said == "Wrote my_work/a.py. Its previous text is in my_work/a.py.previous."
    assert (tmp_path / "my_work/a.py.previous").read_text() == answer


def test_keeps_a_file_edited_elsewhere_until_reset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_stub("my_work/a.py", STUB)
    mine = "def f(rank, world_size):\n    return 42  # my answer\n"
    (tmp_path / "my_work/a.py").write_text(mine)
    said = write_stub("my_work/a.py", STUB)
    assert said.startswith("Kept my_work/a.py") and "--reset" in said
    assert (tmp_path / "my_work/a.py").read_text() == mine
    assert write_stub("--reset my_work/a.py", STUB).startswith("Wrote my_work/a.py.")
    assert (tmp_path / "my_work/a.py").read_text() == STUB
    assert (tmp_path / "my_work/a.py.previous").read_text() == mine


def test_keeps_a_file_that_was_there_before_any_cell_wrote_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_work").mkdir()
    (tmp_path / "my_work/a.py").write_text("# mine\n")
    assert write_stub("my_work/a.py", STUB).startswith("Kept")


@pytest.mark.parametrize("line", ["", "a.txt", "my_work/a.py my_work/b.py", "--reset --reset my_work/a.py"])
def test_a_bad_line_is_one_clear_error(line):
    with pytest.raises(ValueError, match="usage: %%exercise"):
        write_stub(line, STUB)


def test_the_extension_registers_the_cell_magic():
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "ddp_lib.exercises")
    assert "exercise" in ip.magics_manager.magics["cell"]
