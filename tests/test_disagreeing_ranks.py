"""Lesson 01's failing collectives on real gloo groups: a peer that exits mid-collective, and ranks
that all-reduce tensors of different shapes, with and without TORCH_DISTRIBUTED_DEBUG=DETAIL, or of
different dtypes of one width; a rank that skips a new_group; ranks that leave right after init."""

import os

import pytest
from torch.multiprocessing import ProcessExitedException

import ddp_lib.mp
from ddp_lib.demos import disagreeing_ranks

pytestmark = pytest.mark.usefixtures("free_master_port")  # not the tutorial's 12355


def test_a_peer_that_exits_fails_the_waiting_rank_at_once():
    rank0, rank1 = ddp_lib.mp.labelled_spawn(disagreeing_ranks.peer_exits, args=(2,), nprocs=2)
    assert rank1 is None  # exited with code 0: finished, no result
    assert "closed by peer" in rank0["error"] or "reset by peer" in rank0["error"]
    assert rank0["waited_s"] < rank0["timeout_s"] / 10


def test_mismatched_shapes_pass_silently_on_one_rank_without_detail():
    rank0, rank1 = ddp_lib.mp.labelled_spawn(disagreeing_ranks.mismatched_shapes, args=(2,), nprocs=2)
    assert rank0["error"] == "" and rank0["after"] == [2.0, 4.0, 6.0]
    assert "by peer" in rank1["error"]
    assert rank1["done_at"] > rank0["done_at"]  # rank 1 failed once rank 0 had finished


def test_one_element_off_in_a_large_tensor_kills_the_receiving_rank_with_gloos_size_error(capfd):
    with pytest.raises(ProcessExitedException) as caught:
        ddp_lib.mp.labelled_spawn(disagreeing_ranks.mismatched_shapes, args=(2, False, 1000), nprocs=2)
    assert caught.value.error_index == 0 and caught.value.signal_name == "SIGABRT"
    assert "Received data size doesn't match expected size" in caught.value.outputs[0][1]


def test_detail_names_the_mismatch_on_every_rank_before_data_moves():
    for r in ddp_lib.mp.labelled_spawn(disagreeing_ranks.mismatched_shapes, args=(2, True), nprocs=2):
        assert r["error"].startswith("Detected mismatch between collectives on ranks")
        assert "shapes" in r["error"]
        assert r["after"] == [float(v) for v in range(1, 4 + r["rank"])]
        assert r["unchanged"]
        assert r["mismatch"] == "TensorShape: rank 0 [3], rank 1 [4]"


def test_detail_mismatch_names_each_field_that_differs_and_nothing_else():
    def fingerprint(rank, op, shape):
        return (f"Rank {rank} is running collective: CollectiveFingerPrint(SequenceNumber=0, OpType={op}, "
                f"TensorShape={shape}, TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), "
                "device=cpu))")
    error = (f"Detected mismatch between collectives on ranks. {fingerprint(1, 'BROADCAST', '[4, 2]')}, but "
             f"{fingerprint(0, 'ALLREDUCE', '[3, 2]')}).Collectives differ in the following aspects: ...")
    assert disagreeing_ranks.detail_mismatch(error) == (
        "OpType: rank 0 ALLREDUCE, rank 1 BROADCAST; TensorShape: rank 0 [3, 2], rank 1 [4, 2]")
    assert disagreeing_ranks.detail_mismatch("Connection closed by peer") == ""


def test_a_dtype_of_the_same_width_passes_silently_and_mixes_the_bits():
    rank0, rank1 = ddp_lib.mp.labelled_spawn(disagreeing_ranks.mismatched_dtypes, args=(2,), nprocs=2)
    assert (rank0["dtype"], rank1["dtype"]) == ("float32", "int32")
    assert rank0["error"] == rank1["error"] == ""
    assert rank0["as_other_dtype"] == rank1["after"] and rank1["as_other_dtype"] == rank0["after"]
    assert [2, 4, 6] not in (rank0["after"], rank1["after"])


def test_one_element_off_reports_the_abort_and_gloos_line():
    report = disagreeing_ranks.one_element_off(1000)
    assert report["error"] == "RankExitedError: process 0 terminated with signal SIGABRT"
    assert report["gloo_says"] and report["gloo_says"][0].startswith("Received data size doesn't match expected size")


def test_a_skipped_new_group_makes_every_rank_time_out_without_naming_the_skip():
    results = ddp_lib.mp.labelled_spawn(disagreeing_ranks.skipped_new_group, args=(4, "1", 1.0), nprocs=4)
    for r in results:
        assert r["stopped_in"] in ("new_group(evens)", "new_group(odds)", "all_reduce")
        assert "time" in r["error"].lower()
        assert "/" not in r["error"].split("keys:")[0]  # no source path left in the message


def test_exits_after_init_counts_the_launches_that_failed_and_restores_the_port(monkeypatch):
    monkeypatch.setenv("MASTER_PORT", "1")  # a stand-in: each launch picks its own port
    report = disagreeing_ranks.exits_after_init(runs=2, world_size=2)
    assert 0 <= report["failed"] <= 2 and len(report["errors"]) <= report["failed"]
    assert all(error and "launcher:" not in error for error in report["errors"])
    assert os.environ["MASTER_PORT"] == "1"
