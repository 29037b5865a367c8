"""Checkers for the lessons' exercises; ``%load_ext ddp_lib.exercises`` adds the ``%%exercise`` cell magic."""

from ddp_lib.exercises.stubs import load_ipython_extension

__all__ = ["load_ipython_extension"]
