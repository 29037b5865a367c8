"""Small workers that a lesson needs for one demonstration only (the lesson's main workers live
in ``ddp_lib.workers``)."""
