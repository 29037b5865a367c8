"""ddp_lib.demos.torchrun_signals (lesson 06): real torchruns, each sent one signal."""

import signal

from ddp_lib.demos import torchrun_signals


def test_only_listed_signals_reach_the_ranks():
    results = torchrun_signals.send_to_torchrun()
    unlisted = results["SIGUSR1, not listed"]
    assert unlisted["torchrun_exit"] == -signal.SIGUSR1 and unlisted["rank_alive"]  # torchrun died; its rank ran on
    plain = results["SIGUSR1, listed, rank without a handler"]
    assert plain["torchrun_exit"] == 1 and not plain["rank_alive"] and not plain["rank_saved"]
    handled = results["SIGUSR1, listed, rank with a handler"]
    assert handled["torchrun_exit"] == 1 and not handled["rank_alive"] and handled["rank_saved"]
    assert all(r["rank_own_session"] for r in results.values())  # start_new_session=True in torch
