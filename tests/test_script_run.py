"""ScriptRun reads a real ``python -m`` run and reports its exit; last_line reads a traceback's error line."""

import subprocess
import sys

from ddp_lib.demos.script_run import ScriptRun
from ddp_lib.errors import last_line, own_line


def run_module(module: str, *args: str) -> ScriptRun:
    """Run ``python -m module *args`` as lesson 00's cell does."""
    return ScriptRun.of(subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                                       timeout=120))


def test_a_run_reports_exit_code_zero_and_sorted_lines():
    run = run_module("json.tool", "--help")
    assert run.exit_code == 0 and run.verdict() == "exit code: 0 (every rank finished)"
    assert run.printed() == sorted(run.printed()) and any("usage" in line for line in run.printed())


def test_a_run_names_the_last_error_line_of_a_failure():
    run = run_module("ddp_lib_no_such_module")
    assert run.exit_code == 1
    assert run.verdict().startswith("exit code: 1; its last error line: ")
    assert "No module named ddp_lib_no_such_module" in run.verdict()
    assert "abort at exit" not in run.verdict()


def test_verdict_names_the_abort_at_exit():
    stderr = ("Traceback ...\n"
              "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGABRT\n")
    verdict = ScriptRun(1, "", stderr).verdict()
    assert verdict.splitlines()[-1] == "a known torch abort at exit (lesson 02): run it again"


def test_last_line_and_own_line_read_a_real_traceback(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("def f():\n    return 1 / 0\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import mine
        try:
            mine.f()
        except ZeroDivisionError as exc:
            import traceback
            text = "".join(traceback.format_exception(exc))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mine", None)
    assert last_line(text) == "ZeroDivisionError: division by zero"
    assert last_line(ZeroDivisionError("x\n")) == "x" and last_line("  \n", "none") == "none"
    assert own_line(text) == "mine.py line 2: return 1 / 0"
