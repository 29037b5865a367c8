"""The workers' signatures say what their parameters mean, so that a command line can be built
from them: a type for every parameter, a default and one docstring line for every parameter
after (rank, world_size), and a Literal for every choice."""

from __future__ import annotations

import inspect
import re
import typing

from ddp_lib.demos.training_runs import train_with_switches as train
from ddp_lib.workers import WORKERS
from ddp_lib.workers.buckets import WAYS, Way
from ddp_lib.workers.collectives import COLLECTIVES, Collective
from ddp_lib.workers.train import NORMS
from ddp_lib.workers.train import train as copied_train


def test_every_listed_worker_types_defaults_and_describes_its_options():
    for name, worker in WORKERS.items():
        fn = worker.load()
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in params[:2]] == ["rank", "world_size"], name
        doc = inspect.getdoc(fn)
        for p in params[2:]:
            assert p.name in hints, (name, p.name)
            assert p.default is not inspect.Parameter.empty, (name, p.name)
            assert re.search(rf"^Args:\n(?:    .*\n)*    {p.name}: \S", doc, re.M), (name, p.name)


def test_choices_are_literals_and_flags_are_bools():
    hints = typing.get_type_hints(train)
    assert hints["resume"] is bool and hints["set_epoch"] is bool
    assert hints["checkpoint_dir"] == str | None and hints["keep_last"] == int | None
    assert typing.get_args(hints["norm"]) == NORMS == ("none", "batch", "sync")
    assert typing.get_args(Way) == tuple(WAYS)
    assert typing.get_args(Collective) == COLLECTIVES
    # Positional order kept: notebooks call train(rank, world_size, epochs, batch_size, lr, seed, ...)
    assert list(inspect.signature(train).parameters)[:11] == [
        "rank", "world_size", "epochs", "batch_size", "lr", "seed", "checkpoint_dir", "resume", "set_epoch", "norm",
        "fail_at_epoch"]
    # The copied job keeps the lesson's order, without the lesson's switches (set_epoch, fail_at_epoch, ...).
    assert list(inspect.signature(copied_train).parameters) == [
        "rank", "world_size", "epochs", "batch_size", "lr", "seed", "checkpoint_dir", "resume", "norm", "warmup_steps"]
    assert typing.get_type_hints(copied_train)["norm"] == hints["norm"]
