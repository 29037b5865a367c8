"""Checkers for the lessons' exercises: each runs a learner's worker on every rank and says
precisely what is right or wrong. ``%load_ext ddp_lib.exercises`` adds the ``%%exercise`` cell magic."""

from ddp_lib.exercises.stubs import load_ipython_extension

__all__ = ["load_ipython_extension"]
