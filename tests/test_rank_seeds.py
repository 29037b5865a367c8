"""Ranks draw different unseeded random numbers, launch after launch, as fresh interpreters under
torch.multiprocessing.spawn do: a rank forked from the warm forkserver must not replay its state."""

from launcher_workers import unseeded_draw

from ddp_lib.launch import launch


def test_every_rank_and_every_launch_draws_its_own_numbers():
    first = launch(unseeded_draw, 2, show_output=False).results
    second = launch(unseeded_draw, 2, show_output=False).results
    assert len({*first, *second}) == 4, (first, second)
