"""Lesson 07's reading of rank 1's faulthandler dumps."""

from ddp_lib.demos.collision_stack import last_dump_frames, recorded_collectives, where_waited

DUMPS = """Timeout (0:00:00.250000)!
Thread 0x00007f0000000001 (most recent call first):
  File "/x/threading.py", line 331 in wait
  File "/x/_child.py", line 90 in _watch

Thread 0x00007f0000000002 (most recent call first):
  File "/x/failure_lab.py", line 50 in metric_on_rank0_in_ddp_loop
  File "/x/collision_stack.py", line 24 in metric_collision_with_rank1_stacks
Timeout (0:00:00.250000)!
Thread 0x00007f0000000001 (most recent call first):
  File "/x/threading.py", line 331 in wait

Thread 0x00007f0000000002 (most recent call first):
  File "/x/torch/nn/parallel/distributed.py", line 1775 in _pre_forward
  File "/x/torch/nn/parallel/distributed.py", line 1886 in forward
  File "/x/failure_lab.py", line 50 in metric_on_rank0_in_ddp_loop
"""


def test_the_last_dump_of_the_workers_thread_innermost_first():
    assert last_dump_frames(DUMPS, 2) == ["_pre_forward (distributed.py)", "forward (distributed.py)"]


def test_no_dump_gives_no_frames():
    assert last_dump_frames("RuntimeError: Timed out\n") == []


def test_the_flight_recorder_lines_without_their_mark():
    stderr = ("RuntimeError: Timed out\nflight recorder: seq 4 gloo:all_reduce sizes [[5]]\n"
              "flight recorder: seq 5 gloo:broadcast sizes [[3]]\n")
    assert recorded_collectives(stderr) == ["seq 4 gloo:all_reduce sizes [[5]]", "seq 5 gloo:broadcast sizes [[3]]"]
    assert recorded_collectives("no record\n") == []


def test_where_waited_in_plain_words():
    assert where_waited(last_dump_frames(DUMPS, 2)) == "DDP's forward, before the model ran"
    assert where_waited(["wait (threading.py)"]) == "wait (threading.py)"
    assert where_waited([]) == "no stack dump found"
