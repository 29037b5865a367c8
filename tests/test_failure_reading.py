"""ddp_lib.demos.failure_reading and ddp_lib.demos.everyday_mistakes (lesson 07)."""

from ddp_lib.demos import everyday_mistakes, failure_reading


def test_connection_errors_in_each_of_gloos_wordings():
    assert failure_reading.is_connection_error("Connection closed by peer [127.0.0.1]:1234")
    assert failure_reading.is_connection_error("Read error: Connection reset by peer")
    assert failure_reading.is_connection_error("Write error: Broken pipe")
    assert not failure_reading.is_connection_error("Timed out waiting 3000ms for recv operation to complete")


def test_timeouts_in_each_of_gloos_wordings():
    assert failure_reading.is_timeout("Timed out waiting 3000ms for recv operation to complete")
    assert failure_reading.is_timeout("Timed out waiting 2000ms for send operation to complete")
    assert failure_reading.is_timeout("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Application timeout "
                                      "caused pair closure")
    assert not failure_reading.is_timeout("Connection closed by peer [127.0.0.1]:1234")
    assert not failure_reading.is_timeout("[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 2000 ms")


def test_detail_mismatch_names_each_ranks_collective():
    message = ("Detected mismatch between collectives on ranks. Rank 0 is running collective: "
               "CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, TensorShape=[2], TensorDtypes=Float), "
               "but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, "
               "TensorShape=[3], TensorDtypes=Float).")
    assert failure_reading.detail_mismatch(message) == ["Rank 0: ALLREDUCE of shape [2]",
                                                        "Rank 1: ALLREDUCE of shape [3]"]


def test_innermost_calls_come_innermost_first():
    text = ('Traceback (most recent call last):\n  File "a.py", line 1, in main\n    f()\n'
            '  File "b.py", line 2, in f\n    g()\n  File "c.py", line 3, in g\nRuntimeError: x\n')
    assert failure_reading.innermost_calls(text, 2) == ["g", "f"]


def test_in_ddp_buffer_sync_looks_at_the_innermost_calls_only():
    def tb(*names):
        frames = "".join(f'  File "x.py", line 1, in {name}\n    pass\n' for name in names)
        return "Traceback (most recent call last):\n" + frames + "RuntimeError: x\n"
    assert failure_reading.in_ddp_buffer_sync(tb("main", "_sync_module_buffers", "_default_broadcast_coalesced"))
    assert not failure_reading.in_ddp_buffer_sync(tb("_sync_module_buffers", "a", "b", "c"))
    assert not failure_reading.in_ddp_buffer_sync(tb("main", "barrier"))


def test_device_ids_on_a_cpu_model_fails_and_leaving_them_out_builds_ddp():
    wrong, fixed = everyday_mistakes.device_ids_on_cpu()
    assert wrong.startswith("device_ids=[0]: ValueError")
    assert fixed == "device_ids=None: DDP built"


def test_spawn_args_not_a_tuple_fails_in_the_child_and_a_tuple_runs():
    wrong, fixed = everyday_mistakes.spawn_args()
    assert "TypeError" in wrong and "fn(i, *args)" in wrong
    assert fixed == "args=(2,): the process ran"


def test_a_busy_port_fails_and_the_same_port_starts_once_the_earlier_run_stopped():
    busy, free = everyday_mistakes.busy_port()
    assert busy.startswith("the same port: DistNetworkError: ")
    assert "port: PORT" in busy and "name: EADDRINUSE" in busy
    assert free == "the earlier run stopped, the same port: init_process_group started, world size 1"


def test_stack_for_reading_drops_torchs_line_numbers_and_keeps_the_scripts():
    dump = ('Current thread 0x00007f3a (most recent call first):\n'
            '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
            '  File "/a/b/torchrun_failures.py", line 38 in main\n')
    assert failure_reading.stack_for_reading(dump) == (
        'Current thread 0x... (most recent call first):\n'
        '  File "distributed_c10d.py", line ... in all_reduce\n'
        '  File "torchrun_failures.py", line 38 in main\n')


def test_stack_for_reading_drops_thread_ids_and_folders():
    dump = 'Current thread 0x00007f3a (most recent call first):\n  File "/a/b/torchrun_failures.py", line 38 in main\n'
    assert failure_reading.stack_for_reading(dump) == (
        'Current thread 0x... (most recent call first):\n  File "torchrun_failures.py", line 38 in main\n')


def test_ddp_build_exit_codes_runs_the_reproducer_once_per_level():
    import signal

    codes = failure_reading.ddp_build_exit_codes(("DETAIL", "INFO", "OFF"))
    assert list(codes) == ["DETAIL", "INFO", "OFF"]
    assert codes["INFO"] == 0 and codes["OFF"] == 0  # DDP builds without DETAIL
    assert codes["DETAIL"] in (0, -int(signal.SIGSEGV))  # torch 2.13 with gloo: SIGSEGV


def test_innermost_own_call_skips_torchs_frames():
    text = ('Traceback (most recent call last):\n'
            '  File "/home/me/train.py", line 9, in main\n    evaluate(ddp)\n'
            '  File "/home/me/train.py", line 4, in evaluate\n    loss = model(inputs)\n'
            '  File "/venv/site-packages/torch/nn/parallel/distributed.py", line 7, in forward\n    x()\n'
            'RuntimeError: x\n')
    assert failure_reading.innermost_own_call(text) == "evaluate: loss = model(inputs)"
    assert failure_reading.innermost_own_call(text.replace("/home/me/", "/venv/torch/")) == ""
