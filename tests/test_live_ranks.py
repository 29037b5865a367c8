"""ddp_lib.live with real ranks: the Python API in this process, the magics in a real kernel."""

import os
import pickle
import signal
import sys
import threading
import time

import pytest

from conftest import start_kernel, wait_until_gone
from ddp_lib.errors import LaunchInputError
from ddp_lib.live import LiveRanks, RankCellError, RanksError, RanksInterrupted, RanksTimeout

jupyter_client = pytest.importorskip("jupyter_client")

PIDS = "__import__('os').getpid()"


@pytest.fixture
def ranks():
    live = LiveRanks()
    yield live
    if live.running:
        live.stop()


def test_variables_stay_between_cells_and_values_come_back(ranks):
    ranks.start(2)
    assert ranks.run("x = rank + 1") is None
    values = ranks.run("x * 10")
    assert values == {0: "10", 1: "20"}
    assert repr(values) == "[rank 0] 10\n[rank 1] 20"
    assert ranks.run("x * 10;") is None  # a trailing semicolon hides the value, as in a notebook
    assert ranks.run("x = 5", ranks=[1]) is None
    assert ranks.get("x") == [1, 5]
    assert ranks.get("x", ranks=[1]) == [5]
    tensors = ranks.get("__import__('torch').ones(2, requires_grad=True) * rank")
    assert [t.tolist() for t in tensors] == [[0.0, 0.0], [1.0, 1.0]] and not tensors[1].requires_grad


def test_a_multi_line_value_is_shown_under_its_rank(ranks):
    ranks.start(2)
    shown = ranks.run("type('V', (), {'__repr__': lambda self: 'top\\nbottom'})()")
    assert repr(shown) == "[rank 0] top\n         bottom\n[rank 1] top\n         bottom"


class _TimedStdout:
    """A stdout that notes when each piece of text was written."""

    def __init__(self):
        self.writes: list[tuple[float, str]] = []

    def write(self, text):
        self.writes.append((time.monotonic(), text))

    def flush(self):
        pass

    def isatty(self):
        return False


def test_output_is_in_rank_order_and_rank_0s_comes_as_it_is_printed(ranks, monkeypatch):
    timed = _TimedStdout()
    monkeypatch.setattr(sys, "stdout", timed)
    ranks.start(3)
    # Rank 2 prints first and rank 0 last; rank 0 then works on for a second.
    ranks.run("import time\ntime.sleep(0.3 * (world_size - rank))\nprint('hello from', rank)\n"
              "if rank == 0:\n    time.sleep(1.5)\n    print('done', rank)")
    ended = time.monotonic()
    text = "".join(t for _, t in timed.writes)
    assert text == "[rank 0] hello from 0\n[rank 0] done 0\n[rank 1] hello from 1\n[rank 2] hello from 2\n"
    first = next(when for when, t in timed.writes if "hello from 0" in t)
    assert ended - first > 1.0, "rank 0's first line waited for the cell to end"


def test_an_error_names_the_rank_and_the_learners_line_and_the_ranks_live_on(ranks):
    ranks.start(2)
    ranks.run("def share(x):\n    return 10 / x")
    with pytest.raises(RankCellError) as caught:
        ranks.run("x = 7\ny = share(rank)", name="In [4]")
    error = caught.value
    assert error.rank == 0 and error.exc_type == "ZeroDivisionError"
    assert str(error) == ("rank 0 raised ZeroDivisionError: division by zero (at cell 1 line 2: return 10 / x); "
                          "every rank keeps its variables")
    shown = error._render_traceback_()
    assert shown[1:3] == ['  File "In [4]", line 2, in <module>', "    y = share(rank)"]
    assert not any("ddp_lib" in line for line in shown), "the loop that runs cells is not the learner's"
    assert ranks.get("x") == [7, 7] and ranks.get("y", ranks=[1]) == [10.0]


def test_a_syntax_error_names_its_line(ranks):
    ranks.start(1)
    expected = r"^rank 0 raised SyntaxError: invalid syntax \(cell 1, line 2\) \(at cell 1 line 2: x =\)"
    with pytest.raises(RankCellError, match=expected):
        ranks.run("a = 1\nx = ")


def test_a_cell_that_waits_forever_ends_at_its_deadline_saying_where_each_rank_was(ranks, capsys):
    ranks.start(2, init=True)
    pids = ranks.get(PIDS)
    started = time.monotonic()
    with pytest.raises(RanksTimeout) as caught:
        ranks.run("import torch, torch.distributed as dist\nt = torch.ones(1)\n"
                  "if rank == 0:\n    dist.all_reduce(t)", timeout=2)
    assert time.monotonic() - started < 10
    error = caught.value
    assert str(error) == ("the cell did not finish within 2 s on rank 0; every rank was stopped, so no variable "
                          "survives: start them again (%ranks 2 --init)")
    assert list(error.where) == [0]
    assert error.where[0].startswith("cell 1 line 4: dist.all_reduce(t), in all_reduce (torch/distributed/")
    assert not ranks.running
    assert "Current thread" not in capsys.readouterr().err, "the stack went in the error, not in the output"
    assert wait_until_gone(pids) == []


def test_a_hang_inside_a_function_of_an_earlier_cell_names_the_line_that_called_it(ranks):
    ranks.start(2, init=True)
    ranks.run("import torch, torch.distributed as dist\ndef wait():\n    dist.all_reduce(torch.ones(1))")
    ranks.run("x = 1")
    with pytest.raises(RanksTimeout) as caught:
        ranks.run("y = 2\nif rank == 0:\n    wait()", timeout=2)
    where = caught.value.where[0]
    assert where.startswith("cell 1 line 3: dist.all_reduce(torch.ones(1)), in all_reduce (torch/distributed/")
    assert where.endswith("; called from cell 3 line 3: wait()")


def test_the_default_deadline_comes_before_the_groups_timeout():
    from ddp_lib.live import CELL_TIMEOUT_S
    from ddp_lib.process_group import COLLECTIVE_TIMEOUT

    assert CELL_TIMEOUT_S < COLLECTIVE_TIMEOUT.total_seconds()


def test_a_rank_that_fails_while_its_peers_wait_for_it_ends_the_cell_soon(ranks):
    ranks.start(2, init=True)
    started = time.monotonic()
    with pytest.raises(RankCellError) as caught:
        ranks.run("import torch, torch.distributed as dist\nif rank == 1:\n    raise ValueError('no data')\n"
                  "dist.all_reduce(torch.ones(1))")
    assert time.monotonic() - started < 10, "the cell waited for its whole deadline"
    assert caught.value.rank == 1
    assert str(caught.value).startswith("rank 1 raised ValueError: no data (at cell 1 line 3: raise ValueError(")
    assert str(caught.value).endswith("rank 0 still ran 2 s later and did not leave the cell when interrupted "
                                      "(waiting in a collective, most likely); every rank was stopped, so no "
                                      "variable survives: start them again (%ranks 2 --init)")
    assert not ranks.running


def test_a_value_that_cannot_be_unpickled_here_is_that_ranks_error_and_the_next_get_gets_its_own(ranks):
    ranks.start(2)
    # Pickled on the rank; unpickling it here calls int('x'), which raises.
    with pytest.raises(RankCellError) as caught:
        ranks.get("type('B', (), {'__reduce__': lambda self: (int, ('x',))})()")
    assert str(caught.value) == ("rank 0 raised ValueError: its value cannot be unpickled in the notebook: invalid "
                                 "literal for int() with base 10: 'x'; rank 1 raised too; every rank keeps its "
                                 "variables")
    assert ranks.get("rank * 100") == [0, 100], "every rank's answer to the failed get was read"
    assert ranks.get("rank * 100", ranks=[1]) == [100]
    # An answer to an earlier command is never taken for the last one's.
    stale = pickle.dumps((ranks._number - 1, "value", pickle.dumps(5)))
    assert ranks._reply(stale) is None


def test_a_value_of_a_type_defined_in_a_cell_cannot_come_back_and_the_error_says_so_in_one_line(ranks):
    ranks.start(2)
    ranks.run("class ToyModel:\n    pass\nmodel = ToyModel()")
    with pytest.raises(RankCellError) as caught:
        ranks.get("model")
    assert str(caught.value) == ("rank 0 raised PicklingError: cannot send the value back: its type ToyModel was "
                                 "defined in a %%ranks cell, which the notebook cannot import; bring back plain "
                                 "data (numbers, lists, tensors), such as a model's state_dict(); rank 1 raised "
                                 "too; every rank keeps its variables")
    with pytest.raises(RankCellError, match="it is or holds a function or class defined on the ranks"):
        ranks.get("[model]")
    assert ranks.get("rank") == [0, 1]


def test_a_value_whose_repr_raises_is_the_cells_error_and_the_ranks_live_on(ranks):
    ranks.start(2)
    with pytest.raises(RankCellError) as caught:
        ranks.run("class A:\n    def __repr__(self):\n        raise ValueError('no repr')\nx = 1\nA()")
    assert str(caught.value) == ("rank 0 raised ValueError: no repr (at cell 1 line 3: raise ValueError('no repr')); "
                                 "rank 1 raised too; every rank keeps its variables")
    assert ranks.get("x") == [1, 1]


@pytest.mark.parametrize("expression, expected", [
    ("__import__('torch').empty(2, device='meta')", r"^rank 0 raised NotImplementedError: .*meta"),
    ("__import__('sys').exit(0)",
     r"^rank 0 raised SystemExit: 0 \(at ranks\.get line 1: __import__\('sys'\)\.exit\(0\)\); "
     r"rank 1 raised too; every rank keeps its variables$"),
])
def test_a_get_that_fails_on_the_way_back_or_exits_is_an_error_and_the_ranks_live_on(ranks, expression, expected):
    ranks.start(2)
    ranks.run("x = rank")
    with pytest.raises(RankCellError, match=expected):
        ranks.get(expression)
    assert ranks.get("x") == [0, 1]


def test_a_killed_forkserver_is_not_taken_for_dead_ranks(ranks):
    from multiprocessing import forkserver

    ranks.start(2)
    ranks.run("x = rank")
    os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)
    time.sleep(0.5)
    assert ranks.run("x") == {0: "0", 1: "1"}
    assert ranks.get("x") == [0, 1]
    pids = ranks.get(PIDS)
    ranks.stop()
    assert wait_until_gone(pids) == []


def test_a_rank_that_fails_while_another_works_interrupts_it_and_every_rank_keeps_its_variables(ranks):
    ranks.start(2)
    started = time.monotonic()
    with pytest.raises(RankCellError) as caught:
        ranks.run("import time\nx = 'before'\nif rank == 1:\n    raise ValueError('no data')\n"
                  "time.sleep(30)\nx = 'after'")
    assert time.monotonic() - started < 10
    assert caught.value.rank == 1
    assert str(caught.value) == ("rank 1 raised ValueError: no data (at cell 1 line 4: raise ValueError('no data')); "
                                 "rank 0 still ran 2 s later and was interrupted; every rank keeps its variables")
    assert ranks.running
    assert ranks.get("x") == ["before", "before"]


def test_a_rank_that_dies_stops_them_all(ranks):
    ranks.start(2)
    pids = ranks.get(PIDS)
    with pytest.raises(RanksError, match=r"^rank 1 exited with code 3 during the cell; every rank was stopped"):
        ranks.run("import os\nif rank == 1:\n    os._exit(3)")
    assert wait_until_gone(pids) == []


def _press_stop_after(seconds: float) -> threading.Timer:
    """Ctrl-C (the stop button) for this process, ``seconds`` from now."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_the_stop_button_interrupts_every_rank_which_keep_their_variables(ranks):
    ranks.start(2)
    ranks.run("x = rank")
    _press_stop_after(1.0)
    with pytest.raises(RanksInterrupted, match=r"^interrupted: ranks 0, 1 left the cell; every rank keeps"):
        ranks.run("import time\nx = 'before'\ntime.sleep(30)\nx = 'after'")
    assert ranks.get("x") == ["before", "before"]


def test_the_stop_button_interrupts_a_slow_get_and_every_rank_keeps_its_variables(ranks):
    ranks.start(2)
    ranks.run("import time\nx = rank")
    _press_stop_after(1.0)
    with pytest.raises(RanksInterrupted, match=r"^interrupted: ranks 0, 1 left the cell; every rank keeps"):
        ranks.get("time.sleep(30) or x")
    assert ranks.get("x") == [0, 1]


def test_a_get_past_its_deadline_names_the_expression(ranks):
    ranks.start(2)
    ranks.timeout = 2
    with pytest.raises(RanksTimeout) as caught:
        ranks.get("__import__('time').sleep(30)")
    assert "ranks.get line 1: __import__('time').sleep(30)" in str(caught.value.where[0])


def test_the_stop_button_stops_every_rank_when_one_cannot_leave_a_collective(ranks, capsys):
    ranks.start(2, init=True)
    pids = ranks.get(PIDS)
    _press_stop_after(1.5)
    with pytest.raises(RanksInterrupted) as caught:
        ranks.run("import torch, torch.distributed as dist\nif rank == 0:\n    dist.all_reduce(torch.ones(1))")
    assert str(caught.value).startswith("interrupted: rank 0 did not leave the cell within 2 s (rank 0 at cell 1 "
                                        "line 3: dist.all_reduce(torch.ones(1)), in all_reduce")
    assert str(caught.value).endswith("so every rank was stopped and no variable survives: start them again "
                                      "(%ranks 2 --init)")
    assert "Current thread" not in capsys.readouterr().err, "the stack went in the error, not in the output"
    assert wait_until_gone(pids) == []


def test_refusals_are_one_line(ranks):
    with pytest.raises(RanksError, match=r"^no ranks are running: start them first \(%ranks 4 starts 4\)$"):
        ranks.run("x = 1")
    with pytest.raises(RanksError, match=r"^no ranks are running: there is nothing to stop$"):
        ranks.stop()
    with pytest.raises(LaunchInputError, match=r"^world_size 1000 is more processes than one machine should run"):
        ranks.start(1000)
    with pytest.raises(LaunchInputError, match=r"^world_size must be 1 or more, got 0$"):
        ranks.start(0)
    ranks.start(2)
    with pytest.raises(RanksError, match=r"^2 ranks are running already: stop them first \(%ranks stop\)$"):
        ranks.start(2)
    with pytest.raises(RanksError, match=r"^ranks must be among 0 to 1, got \[2\]$"):
        ranks.run("x = 1", ranks=[2])
    ranks.stop()
    with pytest.raises(RanksError, match="nothing to stop"):
        ranks.stop()


def test_only_the_cells_a_message_may_quote_are_kept(ranks):
    ranks.start(1)
    ranks.run("def f():\n    return 1")
    ranks.run("x = f()")
    ranks.run("g = lambda: 2")
    assert sorted(ranks._sources) == ["cell 1", "cell 3"], "a cell that defines nothing is not kept"


def test_a_start_that_fails_keeps_the_timeout_it_had():
    from ddp_lib import _live_magic
    from ddp_lib.live import ranks as notebook_ranks

    before = notebook_ranks.timeout
    with pytest.raises(LaunchInputError):
        _live_magic._line("1000 --timeout 5")
    assert notebook_ranks.timeout == before and not notebook_ranks.running



def test_a_start_without_timeout_goes_back_to_the_default_deadline():
    from ddp_lib import _live_magic
    from ddp_lib.live import CELL_TIMEOUT_S
    from ddp_lib.live import ranks as notebook_ranks

    try:
        _live_magic._line("1 --timeout 100")
        assert notebook_ranks.timeout == 100
        _live_magic._line("stop")
        _live_magic._line("1")
        assert notebook_ranks.timeout == CELL_TIMEOUT_S
    finally:
        if notebook_ranks.running:
            notebook_ranks.stop()

# The magics, in a real kernel.

CLASSIC = '''import os
import sys
import tempfile
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import torch.multiprocessing as mp

from torch.nn.parallel import DistributedDataParallel as DDP

def setup(rank, world_size):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = '12355'

    # initialize the process group
    dist.init_process_group("gloo", rank=rank, world_size=world_size)

def cleanup():
    dist.destroy_process_group()

class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)

    # create model and move it to GPU with id rank
    model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=[rank])

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5).to(rank)
    loss_fn(outputs, labels).backward()
    optimizer.step()

    cleanup()


def run_demo(demo_fn, world_size):
    mp.spawn(demo_fn,
             args=(world_size,),
             nprocs=world_size,
             join=True)
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    km, client = start_kernel(tmp_path_factory.mktemp("kernel"))
    yield km, client
    client.stop_channels()
    km.shutdown_kernel(now=True)


class Cell:
    """What a cell showed: its stdout and stderr text, its Out value, its error."""

    def __init__(self, client, code: str):
        self.stdout, self.stderr, self.value, self.error, self.count = "", "", None, None, None
        for _ in range(5):  # right after an error ipykernel aborts requests already queued: ask again
            reply = client.execute_interactive(code, timeout=120, output_hook=self._take)
            if reply["content"]["status"] != "aborted":
                break
            time.sleep(1)
        self.count = reply["content"].get("execution_count")

    def _take(self, msg) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            setattr(self, content["name"], getattr(self, content["name"]) + content["text"])
        elif kind == "execute_result":
            self.value = content["data"]["text/plain"]
        elif kind == "error":
            self.error = (content["ename"], content["evalue"], content["traceback"])


def test_the_classic_example_steps_through_cell_by_cell_with_its_own_setup(kernel):
    _, client = kernel
    assert Cell(client, "%load_ext ddp_lib.live").error is None
    started = Cell(client, "%ranks 4")
    assert started.stdout.endswith("started 4 ranks: rank and world_size are defined on each\n")
    pasted = Cell(client, "%%ranks\n" + CLASSIC)  # pasted whole: defining run_demo runs nothing
    assert pasted.error is None
    hello = Cell(client, '%%ranks\nprint(f"Running basic DDP example on rank {rank}.")')
    assert hello.stdout == "".join(f"[rank {r}] Running basic DDP example on rank {r}.\n" for r in range(4))
    assert Cell(client, "%%ranks\nsetup(rank, world_size)").error is None
    import torch

    if torch.cuda.device_count() >= 4:  # demo_basic's body, unchanged
        lines = ["model = ToyModel().to(rank)", "ddp_model = DDP(model, device_ids=[rank])"]
        to_device = "labels = torch.randn(20, 5).to(rank)"
    else:  # on a CPU an integer device has nothing to index: the same error on every rank
        moved = Cell(client, "%%ranks\nmodel = ToyModel().to(rank)")
        assert moved.error[0] == "RankCellError"
        assert moved.error[1] == ("rank 0 raised RuntimeError: Cannot access accelerator device when none is "
                                  "available. (at %%ranks cell 4 line 1: model = ToyModel().to(rank)); "
                                  "ranks 1, 2, 3 raised too; every rank keeps its variables")
        lines = ["device = torch.device('cpu')\nmodel = ToyModel().to(device)", "ddp_model = DDP(model)"]
        to_device = "labels = torch.randn(20, 5).to(device)"
    for line in lines:
        assert Cell(client, "%%ranks\n" + line).error is None
    equal = Cell(client, "%%ranks\nround(sum(p.sum().item() for p in model.parameters()), 5)").value
    assert len(set(line.split("] ")[1] for line in equal.splitlines())) == 1, "DDP(...) made the replicas equal"
    for line in ["loss_fn = nn.MSELoss()\noptimizer = optim.SGD(ddp_model.parameters(), lr=0.001)",
                 "optimizer.zero_grad()", "outputs = ddp_model(torch.randn(20, 10))", to_device,
                 "loss_fn(outputs, labels).backward()"]:
        assert Cell(client, "%%ranks\n" + line).error is None
    grads = Cell(client, "ranks.get('model.net1.weight.grad')")
    assert grads.error is None
    check = Cell(client, "g = ranks.get('model.net1.weight.grad')\nprint(all(x.equal(g[0]) for x in g))")
    assert check.stdout == "True\n"
    assert Cell(client, "%%ranks\noptimizer.step()").error is None
    assert Cell(client, "%%ranks\ncleanup()").error is None
    # demo_basic itself, called whole, on fresh ranks: in these, objects of the old group (ddp_model)
    # still hold its store, and with it port 12355. The error names the line inside the pasted function.
    assert Cell(client, "%ranks stop").error is None
    assert Cell(client, "%ranks 4").error is None
    assert Cell(client, "%%ranks\n" + CLASSIC).error is None
    whole = Cell(client, "%%ranks\ndemo_basic(rank, world_size)")
    if torch.cuda.device_count() < 4:
        assert whole.error[0] == "RankCellError", whole.error
        line = CLASSIC.splitlines().index("    model = ToyModel().to(rank)") + 1
        assert f"(at %%ranks cell 1 line {line}: model = ToyModel().to(rank))" in whole.error[1]
    stopped = Cell(client, "%ranks stop")
    assert (stopped.stdout, stopped.error) == ("stopped 4 ranks\n", None)


def test_the_magics_refuse_in_one_line(kernel):
    _, client = kernel
    Cell(client, "%load_ext ddp_lib.live")
    Cell(client, "%ranks stop")  # whatever an earlier test left
    assert Cell(client, "%%ranks\nx = 1").error[:2] == (
        "RanksError", "no ranks are running: start them first (%ranks 4 starts 4)")
    assert Cell(client, "%ranks stop").error[:2] == ("RanksError", "no ranks are running: there is nothing to stop")
    assert Cell(client, "%ranks 1000").error[1].startswith("world_size 1000 is more processes than one machine")
    assert Cell(client, "%ranks four").error[1].startswith("expected a number of ranks or 'stop', got 'four'")
    assert Cell(client, "%ranks 2").error is None
    twice = Cell(client, "%ranks 2")
    assert twice.error[:2] == ("RanksError", "2 ranks are running already: stop them first (%ranks stop)")
    assert twice.error[2] == ["RanksError: 2 ranks are running already: stop them first (%ranks stop)"]
    assert Cell(client, "%%ranks 5\nx = 1").error[1] == "ranks must be among 0 to 1, got [5]"
    assert Cell(client, "%%ranks --timeout 0\nx = 1").error[1] == \
        "--timeout must be a number of seconds above 0, got '0'"
    assert Cell(client, "%%ranks 1\nrank").value == "[rank 1] 1"
    assert Cell(client, "%ranks").stdout == "2 ranks are running\n"


def test_the_stop_button_interrupts_the_ranks_in_a_kernel(kernel):
    km, client = kernel
    Cell(client, "%load_ext ddp_lib.live")
    Cell(client, "%ranks stop")
    assert Cell(client, "%ranks 2").error is None
    client.execute("%%ranks\nimport time\nx = 'before'\ntime.sleep(30)")
    time.sleep(3)
    km.interrupt_kernel()  # what JupyterLab's stop button sends
    deadline = time.monotonic() + 30
    error = None
    while error is None and time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=30)
        if msg["msg_type"] == "error":
            error = msg["content"]
    assert (error["ename"], error["evalue"]) == (
        "RanksInterrupted", "interrupted: ranks 0, 1 left the cell; every rank keeps its variables")
    assert Cell(client, "%%ranks\nx").value == "[rank 0] 'before'\n[rank 1] 'before'"
    Cell(client, "%ranks stop")


# A restart is one of these, then a new kernel: jupyter_client's restart_kernel shuts the kernel
# down (now=False) or kills it (now=True).
@pytest.mark.parametrize("end", ["killed", "shut down"])
def test_a_kernel_that_ends_leaves_no_rank_behind(tmp_path, end):
    km, client = start_kernel(tmp_path)
    try:
        Cell(client, "%load_ext ddp_lib.live")
        assert Cell(client, "%ranks 2").error is None
        pids = [int(p) for p in Cell(client, f"print(*ranks.get({PIDS!r}))").stdout.split()]
        assert len(pids) == 2
        started = time.monotonic()
        if end == "killed":
            os.kill(km.provisioner.process.pid, signal.SIGKILL)  # no clean-up code runs in the kernel
        else:
            km.shutdown_kernel(now=False)  # the kernel exits as it does when a notebook is closed
        assert wait_until_gone(pids, seconds=15) == []
        assert time.monotonic() - started < 15, "the kernel waited for its ranks"
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_store_port_another_process_holds_is_named_with_its_holder(ranks):
    import socket

    with socket.socket() as leftover:  # as a leftover rank 0 of an earlier run
        leftover.bind(("", 0))
        leftover.listen()
        port = leftover.getsockname()[1]
        ranks.start(1)
        ranks.run(f"import torch.distributed as dist\nfrom datetime import timedelta\nport = {port}")
        with pytest.raises(RankCellError) as caught:
            ranks.run("dist.TCPStore('127.0.0.1', port, 1, True, timeout=timedelta(seconds=2))")
    message = str(caught.value)
    assert caught.value.exc_type == "DistNetworkError", message
    assert f"(port {port} is already taken by process {os.getpid()} (" in message, message
    assert "lesson 00" in message, message
