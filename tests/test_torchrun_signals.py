"""ddp_lib.demos.torchrun_signals (lesson 06): real torchruns, one watched while its rank hangs, each
then sent one signal."""

import signal

from ddp_lib.demos import torchrun_signals


def test_a_hung_rank_is_left_alone_and_only_listed_signals_reach_the_ranks():
    watched = torchrun_signals.finish(torchrun_signals.start({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}))
    hang = watched["sleeper"]  # after HANG_S seconds asleep: nobody stopped or restarted the rank
    assert hang["torchrun_alive"] and hang["rank_alive"] and hang["same_rank"] and hang["restart_count"] == "0"
    assert hang["use_agent_store"] == "False"  # the variable given to that job alone
    stack = watched["stack"]  # SIGUSR1 to the rank with faulthandler's line: its stack, and it runs on
    assert stack["stack_printed"] and stack["rank_alive"] and not stack["saved"]
    results = watched["cases"]
    unlisted = results["SIGUSR2, not listed"]
    assert unlisted["torchrun_exit"] == -signal.SIGUSR2 and unlisted["rank_alive"]  # torchrun died; its rank ran on
    plain = results["SIGUSR2, listed, rank without a handler"]
    assert plain["torchrun_exit"] == 1 and not plain["rank_alive"] and not plain["rank_saved"]
    handled = results["SIGUSR2, listed, rank with a handler"]
    assert handled["torchrun_exit"] == 1 and not handled["rank_alive"] and handled["rank_saved"]
    assert all(r["rank_own_session"] for r in results.values())  # start_new_session=True in torch

