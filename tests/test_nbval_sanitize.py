"""tests/nbval_sanitize.cfg, the rewrites nbval applies to stored and fresh outputs before comparing:
the wordings a lesson cannot make deterministic come out the same, and nothing else is touched."""

import configparser
import re
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parent / "nbval_sanitize.cfg"


def sanitize(text: str) -> str:
    """``text`` as nbval sees it: each section's regex replaced, in the file's order."""
    config = configparser.ConfigParser()
    config.read(CONFIG)
    for section in config.sections():
        text = re.sub(config[section]["regex"], config[section]["replace"], text)
    return text


ADVICE = ("This is typically caused by a remote worker crashing. Check the logs of the remote worker before "
          "reporting an error. GLHF! \N{BEACH WITH UMBRELLA}\N{VARIATION SELECTOR-16}")


@pytest.mark.parametrize("message", [
    "Timed out waiting 2000ms for recv operation to complete",
    "Timed out waiting 1000ms for send operation to complete",
    "Application timeout caused pair closure",
    "Connection closed by peer",
    f"Connection closed by peer [127.0.0.1]:PORT. {ADVICE}",  # whole, as readable() leaves it
    "Connection closed by peer [127.0.0.1]:PORT. This is typically caused by a ...",  # cut by readable(m, limit)
    "Connection closed by peer [127.0.0.1]:PORT. This is ...",
    "Connection reset by peer",
    "Read error [127.0.0.1]:43236: Connection reset by peer",
    "Read error [127.0.0.1]:PORT: Connection reset by peer. ...",  # its port masked by readable()
])
def test_each_wording_of_a_gloo_peer_failure_reads_the_same(message):
    assert sanitize(f"rank 0: RuntimeError: {message}\nranks that failed: [0, 1]\n") == (
        "rank 0: RuntimeError: GLOO_PEER_FAILURE\nranks that failed: [0, 1]\n")


def test_text_after_a_peer_failure_on_its_line_is_kept():
    line = "rank 1: RuntimeError: Connection reset by peer. This is ... | this rank's collectives: allreduce\n"
    assert sanitize(line) == "rank 1: RuntimeError: GLOO_PEER_FAILURE | this rank's collectives: allreduce\n"


def test_a_different_error_is_not_rewritten():
    line = "rank 0: RuntimeError: Expected to have finished reduction in the prior iteration\n"
    assert sanitize(line) == line


@pytest.mark.parametrize("line", [
    "torch's mp.spawn: every rank finished",
    "process 1 terminated with signal SIGABRT (folded above: 'Deeper: two rare problems at exit'; run it again)",
    "process 0 terminated with signal SIGABRT (folded above: 'Deeper: two rare problems at exit'; run it again)",
])
def test_lesson_00s_fixed_file_under_mp_spawn_reads_the_same_after_an_abort_at_exit(line):
    assert sanitize(f"ranks done\n{line}\n") == (
        "ranks done\nSPAWN_00_FINISHED\n")


def test_a_rank_that_failed_otherwise_under_mp_spawn_is_not_hidden():
    # Another signal, or an exit code, is a real failure: nbval must still see it.
    for line in ("process 1 terminated with signal SIGSEGV"
                 " (folded above: 'Deeper: two rare problems at exit'; run it again)",
                 "process 1 terminated with exit code 1"):
        assert "SPAWN_00_FINISHED" not in sanitize(line + "\n")


def test_an_exercise_stub_reads_the_same_whether_or_not_an_earlier_run_left_other_text():
    fresh = "Wrote my_work/lesson02_launch.py.\n"
    again = "Wrote my_work/lesson02_launch.py. Its previous text is in my_work/lesson02_launch.py.previous.\n"
    assert sanitize(again) == sanitize(fresh) == fresh
    kept = "Kept my_work/lesson02_launch.py: it was changed outside this cell\n"
    assert sanitize(kept) == kept  # a kept file is another outcome, and still shows


def test_lesson_02s_shared_model_run_reads_the_same_after_an_abort_at_exit():
    clean = "the kernel's weight: -0.8\n"
    aborted = ("(rank 1 aborted at exit, after its work: torch's rare abort, docs/reliability.md)\n"
               "the kernel's weight: -0.8\n")
    assert sanitize(aborted) == sanitize(clean) == clean
