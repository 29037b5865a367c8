"""The command line's worker options come from each worker's signature, annotations and
docstring; values a worker would refuse late are refused before any process starts."""

from __future__ import annotations

import json
import subprocess

import pytest

from ddp_lib import cli
from ddp_lib.errors import LaunchInputError
from ddp_lib.launch._worker_params import docstring_args, worker_params
from ddp_lib.workers import WORKERS


def refused_in_one_line(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""  # no rank ran: the launcher would print each rank's output here
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("ddp_lib: error: "), out.stderr
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("name", list(WORKERS))
def test_every_registered_worker_gives_a_parser_whose_help_lists_each_parameter(name):
    fn = WORKERS[name].load()
    params = worker_params(fn)
    parser = cli._worker_parser(name, WORKERS[name].summary, params)
    text = parser.format_help()
    for param in params:
        assert param.type is not None, f"{name}: {param.name} cannot be given on the command line"
        assert param.flag in text
        if param.help:
            assert " ".join(param.help.split()[:3]) in " ".join(text.split())


def test_the_registry_holds_names_and_summaries_only():
    for worker in WORKERS.values():
        assert set(vars(worker)) == {"target", "summary"}
        assert worker.summary and "\n" not in worker.summary


def test_help_of_a_real_worker_lists_its_options(cli_in_process):
    out = cli_in_process("run", "train", "--help")
    assert out.returncode == 0, out.stderr
    for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--checkpoint-dir", "--resume", "--set-epoch",
                 "--norm", "--fail-at-epoch"):
        assert flag in out.stdout


def test_docstring_args_block_gives_one_line_per_parameter():
    from cli_workers import configured

    docs = docstring_args(configured)
    assert docs["resume"] == "continue from the latest checkpoint in checkpoint_dir, if any"
    assert docs["norm"] == "normalisation layer" and set(docs) == {p.name for p in worker_params(configured)}


def test_precise_annotations_become_flags_choices_and_optional_values_passed_as_keywords(cli_with_ranks):
    out = cli_with_ranks("run", "cli_workers:configured", "--world-size", "2", "--json", "--epochs", "3", "--lr", "0.5",
                         "--resume", "--no-shuffle", "--checkpoint-dir", "/tmp/ckpt", "--limit", "7", "--norm", "batch",
                         "--batch-size", "4")
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout.splitlines()[-1])
    assert results == [{"rank": r, "world_size": 2, "epochs": 3, "lr": 0.5, "resume": True, "shuffle": False,
                        "checkpoint_dir": "/tmp/ckpt", "limit": 7, "norm": "batch", "batch_size": 4} for r in (0, 1)]


def test_left_out_options_take_the_signatures_defaults(cli_with_ranks):
    out = cli_with_ranks("run", "cli_workers:configured", "--world-size", "1", "--json", "--limit", "none")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [
        {"rank": 0, "world_size": 1, "epochs": 8, "lr": 0.1, "resume": False, "shuffle": True,
         "checkpoint_dir": None, "limit": None, "norm": "none", "batch_size": 16}]


@pytest.mark.parametrize("args, message", [
    (["cli_workers:configured", "--norm", "bogus"], "argument --norm: invalid choice: 'bogus'"),
    (["cli_workers:configured", "--epochs", "three"], "argument --epochs: invalid int value: 'three'"),
    (["cli_workers:configured", "--resume", "1"], "unrecognized arguments: 1"),
    (["cli_workers:needs_path"], "the following arguments are required: --path"),
    (["cli_workers:nowhere"], "cannot import worker 'cli_workers:nowhere'"),
])
def test_bad_worker_options_exit_2_in_one_line(args, message, cli_in_process):
    refused_in_one_line(cli_in_process("run", args[0], "--world-size", "2", *args[1:]), message)


# Item: values a worker would refuse only after every rank had started.
@pytest.mark.parametrize("args, message", [
    (["train", "--batch-size", "0"], "--batch-size must be a whole number, 1 or more, at most 2147483647, got 0"),
    (["train", "--batch-size", "-4"], "--batch-size must be a whole number, 1 or more, at most 2147483647, got -4"),
    (["train", "--batch-size", "99999999999999999999"],
     "--batch-size must be a whole number, 1 or more, at most 2147483647, got 99999999999999999999"),
    (["train", "--keep-last", "0"], "--keep-last must be a whole number, 1 or more, got 0"),
    (["train", "--keep-last", "-1"], "--keep-last must be a whole number, 1 or more, got -1"),
    (["train", "--seed", "99999999999999999999999"],
     "--seed must be a whole number, 0 or more, at most 4294967295, got 99999999999999999999999"),
    (["train", "--checkpoint-dir", "", "--resume"], "--resume needs --checkpoint-dir, got ''"),
    (["train", "--resume"], "--resume needs --checkpoint-dir, got None"),
    (["train", "--epochs", "0"], "--epochs must be a whole number, 1 or more, got 0"),
    (["train", "--lr", "nan"], "--lr must be a finite number above 0, got nan"),
    (["train", "--lr", "inf"], "--lr must be a finite number above 0, got inf"),
    (["train", "--lr", "-0.1"], "--lr must be a finite number above 0, got -0.1"),
    (["ddp_run", "--per-rank-batch", "0"],
     "--per-rank-batch must be a whole number, 1 or more, at most 2147483647, got 0"),
    (["scratch_vs_torch", "--bucket-cap-mb", "0"], "--bucket-cap-mb must be a finite number above 0, got 0.0"),
    (["ddp_lib.workers.training_loop:train_loop", "--compile", "--compile-backend", "tvm"],
     "--compile-backend must be one of 'inductor', 'aot_eager', 'eager', got 'tvm'"),
])
def test_worker_values_are_checked_before_any_process_starts(args, message, cli_in_process):
    refused_in_one_line(cli_in_process("run", args[0], "--world-size", "2", *args[1:]), message)


def test_a_users_worker_is_held_to_its_own_signature_not_to_ddp_libs_parameter_names():
    from cli_workers import configured

    from ddp_lib.launch._checks import check_worker_arguments

    check_worker_arguments(configured, (), {"batch_size": 0, "epochs": 0, "lr": float("nan")})  # its own to check
    with pytest.raises(LaunchInputError, match=r"^--norm must be one of 'none', 'batch', 'sync', got 'layer'$"):
        check_worker_arguments(configured, (), {"norm": "layer"}, as_flags=True)


def test_an_unknown_norm_is_refused_before_any_process_starts(cli_in_process):
    # With norm annotated Literal["none", "batch", "sync"], as train's is meant to be.
    refused_in_one_line(cli_in_process("run", "cli_workers:configured", "--world-size", "2", "--norm", "layer"),
                        "argument --norm: invalid choice: 'layer' (choose from 'none', 'batch', 'sync')")


def test_a_worker_parameter_without_a_command_line_type_and_no_default_is_refused():
    def odd(rank: int, world_size: int, model: object):
        """A worker the command line cannot feed."""

    with pytest.raises(LaunchInputError, match="parameter model has no type the command line can give"):
        cli._worker_parser("odd", "", worker_params(odd))


def test_a_worker_parameter_named_like_a_launcher_option_is_refused():
    def timed(rank: int, world_size: int, timeout: float = 1.0):
        """A worker whose option would hide the launcher's --timeout."""

    with pytest.raises(LaunchInputError, match="parameter timeout clashes with the launcher's own option --timeout"):
        cli._worker_parser("timed", "", worker_params(timed))
