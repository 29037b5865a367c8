"""Checkers for the lessons' exercises: each runs a learner's worker on every rank and says
precisely what is right or wrong."""


def load_ipython_extension(ipython) -> None:
    """``%load_ext ddp_lib.exercises`` adds the ``%%exercise`` cell magic (see ddp_lib/exercises/stubs.py)."""
    from ddp_lib.exercises.stubs import load_ipython_extension as load

    load(ipython)
