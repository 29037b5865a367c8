"""Lesson 00, exercise 2: a worker that says who it is."""


def who_am_i(rank: int, world_size: int) -> dict:
    # The launcher passes the rank first; rank 0 is the main process by convention.
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0}
