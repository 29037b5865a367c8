"""What an adversarial pass found in the command line and the launcher's input checks: values
that int() or str.isdigit() would take, option prefixes, a torchrun script's main(), a
worker's error of several lines, the ranks' stacks at a timeout."""

from __future__ import annotations

import pytest
from test_cli import one_line_refusal

from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.launch._checks import check_env, whole_number


@pytest.mark.parametrize("text, value", [("3", 3), (" 12 ", 12), ("1_0", None), ("٣", None), ("²", None),
                                         ("", None), ("-1", None), ("+2", None)])
def test_a_whole_number_is_ascii_digits_only(text, value):
    assert whole_number(text) == value


@pytest.mark.parametrize("world_size", ["1_0", "٣", "²"])
def test_a_world_size_in_other_digits_is_refused(world_size, cli_in_process):
    out = cli_in_process("run", "hello", "--world-size", world_size)
    one_line_refusal(out, f"--world-size must be a whole number of processes (1 or more), got {world_size!r}")


@pytest.mark.parametrize("name, value", [("OMP_NUM_THREADS", "²"), ("OMP_NUM_THREADS", "2147483648"),
                                         ("OMP_NUM_THREADS", "٣"), ("DDP_LIB_MAX_WORLD_SIZE", "²"),
                                         ("TORCH_DISTRIBUTED_DEBUG", "detaıl")])
def test_environment_values_that_pass_isdigit_or_upper_are_refused(name, value, cli_in_process):
    out = cli_in_process("run", "hello", "--world-size", "2", env={name: value})
    one_line_refusal(out, f"ddp_lib: error: {name} must be")
    assert f"got {value!r}" in out.stderr


@pytest.mark.parametrize("env", [{"A=B": "1"}, {"": "1"}, {"A\0": "1"}, {"A": "x\0y"}])
def test_env_that_is_no_environment_variable_is_refused_before_starting(env):
    with pytest.raises(LaunchInputError, match=r"^env: .* is not an environment variable"):
        check_env(env, 2)


def test_an_option_prefix_is_not_taken_for_the_option(cli_in_process):
    out = cli_in_process("run", "hello", "--world-siz", "2")
    one_line_refusal(out, "unrecognized arguments: --world-siz 2")


def test_a_torchrun_scripts_main_gets_a_hint_about_its_signature(cli_in_process):
    out = cli_in_process("run", "cli_workers:torchrun_main", "--world-size", "2", "--save-every", "1",
                         "--total-epochs", "2")
    one_line_refusal(out, "worker cli_workers:torchrun_main takes (save_every, total_epochs, batch_size), but run "
                          "calls it as fn(rank, world_size, --options...)")


def test_a_bare_exception_reads_without_a_dangling_colon():
    assert str(WorkerError(0, "KeyboardInterrupt", "")) == "rank 0 raised KeyboardInterrupt"


def test_the_command_line_prints_a_workers_whole_message_and_a_timeouts_stacks(cli_with_ranks):
    out = cli_with_ranks("run", "cli_workers:raise_two_lines", "--world-size", "2")
    assert out.returncode == 1
    assert "ddp_lib: rank 0 raised ValueError: summary:\n\tthe detail\n" in out.stderr
    out = cli_with_ranks("run", "hang_on_rank", "--world-size", "2", "--timeout", "3")
    assert out.returncode == 1
    assert "ddp_lib: the job did not finish within its 3 s deadline" in out.stderr
    assert "was here when stopped:" in out.stderr and "File " in out.stderr, out.stderr[-3000:]
