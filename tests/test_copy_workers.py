"""Every worker module runs when copied out of the package with the files ddp_lib/workers/copying.py
names (the module, process_group.py and, where it needs it, shared.py; the README's table is written
from that map), where ``ddp_lib`` cannot be imported: under plain ``torch.multiprocessing.spawn`` and
under ``torchrun``, with the same results as through ddp_lib. One launch of each kind runs every
worker the command line lists and one of each other module (a module whose workers are slow to run
or need more ranks is imported only), on 2 ranks."""

from __future__ import annotations

import ast
import importlib.util
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

import ddp_lib
from conftest import run_launcher
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import DEFAULT_MASTER_PORT, free_port, port_in_use
from ddp_lib.workers import WORKERS
from ddp_lib.workers.copying import FILES_TO_COPY, OPTIONAL_PACKAGES

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = pathlib.Path(ddp_lib.__file__).resolve().parent
TORCHRUN = pathlib.Path(sys.executable).with_name("torchrun")


def package_path(file: str) -> str:
    """Where a file of the copy table lives, relative to the ddp_lib package directory."""
    return file if file == "process_group.py" else f"workers/{file}"

# The workers that need CUDA GPUs; on a CPU machine only their module is copied and imported.
GPU_ONLY = {"nccl_cpu_tensor", "without_set_device", "with_set_device"}
# Workers whose results hold timings or launcher-specific values: only checked to have run.
NOT_COMPARED = {"unused_parameters", "fp16_compression", "backward_timeline", "torchrun_env", "describe_rank",
                "count_allreduces", "memory_run"}

# (module, function, keyword arguments) for each worker the command line lists, train, and one
# worker of every other module (function None: the module is only imported, see the comments).
# "{tmp}" becomes a directory of the run. Arguments that make a worker fail on purpose name a
# rank that does not exist, so the run shows the worker itself works.
JOBS = [
    ("basic", "demo_basic", {"seed": 3}),
    ("faulty_ranks", "raise_on_rank", {"bad_rank": -1}),
    ("faulty_ranks", "hang_on_rank", {"bad_rank": -1}),
    ("collectives", "whoami", {"method": "env"}),
    ("collectives", "run_collective", {"name": "reduce_scatter"}),
    ("collectives", "subgroups", {}),
    ("ring", "ring_check", {"numel": 10, "seed": 1}),
    ("placement", "input_placement", {"pass_device_ids": False, "move_inputs": True}),
    ("placement", "where_am_i", {}),
    ("placement", "simulate_nodes", {"nproc_per_node": 1, "target": "placement:where_am_i"}),
    ("placement", "checkpoint_devices", {"path": "{tmp}/toy.pt"}),
    ("gradients", "broadcast_at_construction", {}),
    ("gradients", "grads_after_backward", {}),
    ("gradients", "ddp_run", {"steps": 3}),
    ("gradients", "no_sync_run", {}),
    ("gradients", "unused_parameters", {"find_unused_parameters": True}),
    ("gradients", "fp16_compression", {}),
    ("buckets", "scratch_vs_torch", {"way": "buckets", "steps": 2}),
    ("buckets", "count_allreduces", {"bucket_cap_mb": 0.01}),
    ("buckets", "backward_timeline", {"warmup": 0, "per_rank_batch": 8}),
    ("spawning", "hello", {}),
    ("spawning", "describe_rank", {}),
    ("spawning", "fail_on_rank", {"bad_rank": -1}),
    ("spawning", "chatty", {"lines": 1}),
    ("train", "train", {"epochs": 1, "checkpoint_dir": "{tmp}/ckpt"}),  # one epoch, with its checkpoint
    ("template", "train_job", {"epochs": 1, "checkpoint_dir": "{tmp}/template"}),
    ("torchrun_env", "torchrun_env", {}),
    ("collective_extras", "objects_and_single_tensors", {}),
    ("point_to_point", "send_recv", {}),
    ("train_pitfalls", "state_dict_keys", {}),
    ("training_loop", "evaluate_padded", {}),
    ("failure_lab", "sampler_orders", {"call_set_epoch": True, "epochs": 2}),
    ("beyond_ddp", "memory_run", {"strategy": "ddp", "steps": 1, "width": 8}),
    ("compiled", None, {}),  # torch.compile takes tens of seconds per worker
    ("torchrun_failure", None, {}),  # a torchrun script whose rank 1 dies on purpose
]

# Runs every job in each rank: under mp.spawn (argv[1] == "spawn") or as one torchrun rank.
# Each worker module is imported from its own directory, which holds only the files the README
# names for it. ddp_lib is made unimportable first, in this process and in its children.
RUNNER = textwrap.dedent('''
    import faulthandler, importlib, os, signal, socket, sys, time
    sys.modules["ddp_lib"] = None  # the package is installed in this environment: hide it
    # A rank still running when the test gives up gets SIGTERM (from torchrun, or the test): it
    # writes every thread's stack to stderr first, which the test's error shows.
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    import torch
    import torch.multiprocessing as mp

    def run_all(rank, world_size, root, jobs):
        try:
            import ddp_lib  # noqa: F401
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("ddp_lib is importable in the copied project")
        results = {}
        for job, (module, name, kwargs, port) in enumerate(jobs):
            if port:
                # A group after the first needs a store of its own: torch names the default
                # group's keys the same each time, so a reused store hands out the last group's
                # addresses (torchrun's store lives as long as the job). Rank 0 picks the port
                # just before the group binds it: one picked at the start can be taken meanwhile
                # by any connection's ephemeral port (the OS hands them out from the same range).
                port_file = os.path.join(root, f"port.{sys.argv[1]}.{job}")
                if rank == 0:
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", 0))
                        port = s.getsockname()[1]
                    with open(port_file + ".tmp", "w") as f:
                        f.write(str(port))
                    os.replace(port_file + ".tmp", port_file)
                while not os.path.exists(port_file):
                    time.sleep(0.01)
                with open(port_file) as f:
                    port = int(f.read())
                os.environ["MASTER_PORT"] = str(port)
                os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
            sys.path.insert(0, os.path.join(root, module))
            try:
                imported = importlib.import_module(module)
                results[f"{module}.{name}"] = getattr(imported, name)(rank, world_size, **kwargs) if name else None
            finally:
                sys.path.pop(0)
                for copied in (module, "process_group", "shared", "train"):  # the next module imports its own
                    sys.modules.pop(copied, None)
            # Nobody starts the next group before every rank has left this one.
            open(os.path.join(root, f"done.{sys.argv[1]}.{job}.{rank}"), "w").close()
            while not all(os.path.exists(os.path.join(root, f"done.{sys.argv[1]}.{job}.{r}"))
                          for r in range(world_size)):
                time.sleep(0.01)
        torch.save(results, os.path.join(root, f"results.{sys.argv[1]}.{rank}.pt"))
        if sys.argv[1] == "torchrun":
            # Leave without Python's teardown, as the template does under torchrun: now and then a
            # rank aborts or stalls there after its work is done (lesson 02, "the rare abort at exit").
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    if __name__ == "__main__":
        root, jobs = sys.argv[2], eval(sys.argv[3])
        if sys.argv[1] == "spawn":
            mp.spawn(run_all, args=(2, root, jobs), nprocs=2)  # the tutorial's launch, nothing else
        else:
            run_all(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), root, jobs)
''')


def copy_table() -> dict[str, list[str]]:
    """Worker module name -> the files to copy."""
    return {module: list(files) for module, files in FILES_TO_COPY.items()}


def test_the_readme_table_is_written_from_the_map():
    spec = importlib.util.spec_from_file_location("copy_table", REPO / "tools" / "copy_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    readme = (REPO / "README.md").read_text()
    assert tool.with_table(readme, tool.table()) == readme, "run python tools/copy_table.py"


# Modules under ddp_lib/workers/ that hold no workers: the command line's list, this map, the helpers.
NOT_WORKER_MODULES = {"__init__", "copying", "shared"}


def test_every_worker_module_has_a_row_and_a_job_and_every_listed_worker_a_job():
    modules = {path.stem for path in (PACKAGE / "workers").glob("*.py")} - NOT_WORKER_MODULES
    table = copy_table()
    assert set(table) == modules
    assert {module for module, _, _ in JOBS} == modules
    # Workers the command line runs from the copied modules (a lesson's wrapper such as
    # ddp_lib.demos.training_runs:train_with_switches is not copied, so has no row).
    listed = {w.target.split(":")[1] for w in WORKERS.values() if w.target.startswith("ddp_lib.workers.")} | {"train"}
    assert listed - GPU_ONLY <= {name for _, name, _ in JOBS}
    helpers = {"process_group.py", "shared.py"} | {f"{module}.py" for module in table}
    for module, files in table.items():
        assert files[0] == f"{module}.py" and set(files[1:]) <= helpers, (module, files)


# Imported only inside the function that needs it, for an option the map names (the README's row
# says so). None today: run train's tqdm bar is the lesson's (ddp_lib/demos/training_runs.py).
OPTIONAL_IMPORTS = {module: set(packages) for module, packages in OPTIONAL_PACKAGES.items()}


def _imports(tree: ast.AST, in_function: bool = False):
    """(node, inside a function body) for every import in ``tree``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        yield from _imports(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))


def test_copied_files_import_only_torch_the_standard_library_and_each_other():
    for files in copy_table().values():
        names = {f.removesuffix(".py") for f in files}
        for file in files:
            source = (PACKAGE / package_path(file)).read_text()
            for node, in_function in _imports(ast.parse(source)):
                if isinstance(node, ast.Import):
                    roots = [alias.name.split(".")[0] for alias in node.names]
                elif node.level == 0:
                    roots = [node.module.split(".")[0]]
                    if roots == ["ddp_lib"]:  # the try branch the copy falls back from
                        assert node.module.rsplit(".", 1)[-1] in names, (file, node.module)
                        continue
                else:
                    continue
                optional = OPTIONAL_IMPORTS.get(file.removesuffix(".py"), set()) if in_function else set()
                for root in roots:
                    assert root in sys.stdlib_module_names or root in {"torch"} | names | optional, (file, root)


def test_an_optional_import_is_named_in_the_readme_row():
    rows = (REPO / "README.md").read_text().split("### Copying a worker into your project", 1)[1]
    for module, extras in OPTIONAL_IMPORTS.items():
        row = next(line for line in rows.splitlines() if line.startswith(f"| `{module}.py` |"))
        assert all(f"pip install {extra}" in row for extra in extras), row


def test_a_copied_file_starts_with_the_lessons_code():
    # The worker a lesson runs first comes first, its helpers after; the lesson's switches and
    # measurements live in ddp_lib/demos/ (training_runs.py, loop_runs.py), not in the copied file.
    for module, first in (("train", "train"), ("training_loop", "train_loop"), ("template", "make_datasets")):
        tree = ast.parse((PACKAGE / "workers" / f"{module}.py").read_text())
        defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        assert defined[0] == first, (module, defined[:3])
    def names(module: str) -> set[str]:  # every name the code uses or defines (docstrings left out)
        tree = ast.parse((PACKAGE / "workers" / f"{module}.py").read_text())
        nodes = list(ast.walk(tree))
        return ({n.id for n in nodes if isinstance(n, ast.Name)} | {n.arg for n in nodes if isinstance(n, ast.arg)}
                | {a.name for n in nodes if isinstance(n, ast.Import) for a in n.names})

    assert not names("train") & {"fail_at_epoch", "keep_last", "tqdm", "set_epoch", "progress", "restart"}
    assert not names("training_loop") & {"clip", "comm_hook", "hook_state", "grad_norms", "step_seconds"}


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """Each listed module with the files the README names, in a directory of its own."""
    root = tmp_path_factory.mktemp("project")
    for module, files in copy_table().items():
        (root / module).mkdir()
        for file in files:
            shutil.copy(PACKAGE / package_path(file), root / module / file)
    (root / "runner.py").write_text(RUNNER)
    return root


def _jobs(root: pathlib.Path, tag: str) -> list:
    """JOBS with paths filled in and, after the first (which uses the launch's own settings), True:
    that job's group gets a port of its own, picked by rank 0 when the job starts."""
    (root / tag).mkdir()
    return [(m, n, {k: v.replace("{tmp}", str(root / tag)) if isinstance(v, str) else v for k, v in kw.items()},
             bool(i))
            for i, (m, n, kw) in enumerate(JOBS)]


def _run(root: pathlib.Path, how: str, env: dict) -> list[dict]:
    command = [sys.executable, "-I", str(root / "runner.py")]
    if how == "torchrun":
        command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(root / "runner.py")]
    env = {**{k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")}, **env}
    proc = run_launcher(command + [how, str(root), repr(_jobs(root, how))], cwd=root, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-8000:]
    return [torch.load(root / f"results.{how}.{rank}.pt", weights_only=False) for rank in range(2)]


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a if k not in ("path",))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.allclose(a, b, atol=1e-6)
    if isinstance(a, float):
        return a == pytest.approx(b, abs=1e-6)
    return a == b


@pytest.fixture(scope="module")
def spawned(copied):
    # Nothing set, as in the tutorial: the ranks meet on the default 127.0.0.1:12355, one job
    # after another. Only if another program holds that port, the environment names a free one.
    env = {"MASTER_PORT": str(free_port())} if port_in_use(DEFAULT_MASTER_PORT) else {}
    return _run(copied, "spawn", env)


def test_copied_workers_run_under_mp_spawn_and_torchrun_alike(copied, spawned):
    under_torchrun = _run(copied, "torchrun", {})
    for rank in range(2):
        assert spawned[rank].keys() == under_torchrun[rank].keys() == {f"{m}.{n}" for m, n, _ in JOBS}
        for key, value in spawned[rank].items():
            if key.split(".")[1] not in NOT_COMPARED:
                assert _same(value, under_torchrun[rank][key]), key
    assert under_torchrun[0]["torchrun_env.torchrun_env"]["env"]["TORCHELASTIC_RUN_ID"] == "set"
    assert spawned[0]["torchrun_env.torchrun_env"]["env"]["TORCHELASTIC_RUN_ID"] == "unset"


def test_copied_workers_give_the_results_they_give_inside_ddp_lib(spawned):
    from ddp_lib.workers.basic import demo_basic
    from ddp_lib.workers.gradients import ddp_run
    from ddp_lib.workers.train import train

    assert _same(run_ranks(demo_basic, 2, kwargs={"seed": 3}), [spawned[r]["basic.demo_basic"] for r in range(2)])
    assert _same(run_ranks(ddp_run, 2, kwargs={"steps": 3}), [spawned[r]["gradients.ddp_run"] for r in range(2)])
    inside = run_ranks(train, 2, kwargs={"epochs": 1})
    copied_train = [spawned[r]["train.train"] for r in range(2)]
    assert [r["losses"] for r in inside] == [r["losses"] for r in copied_train]
    assert [r["params"] for r in inside] == [r["params"] for r in copied_train]


def test_the_default_master_port_is_the_tutorials_and_a_busy_one_is_named(copied):
    # Under plain mp.spawn with nothing set, the ranks meet on 127.0.0.1:12355 (the tutorial's).
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    script = copied / "default_port.py"
    script.write_text(textwrap.dedent('''
        import os, sys
        sys.modules["ddp_lib"] = None
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "basic"))
        from process_group import setup, teardown
        try:
            setup(0, 2)
        except RuntimeError as e:
            print(e)
            sys.exit(3)
    '''))
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is not busy
        try:
            busy.bind(("127.0.0.1", DEFAULT_MASTER_PORT))
        except OSError:
            pass  # another program listens there: busy either way
        else:
            busy.listen()
        proc = subprocess.run([sys.executable, "-I", str(script)], env=env, capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout.strip() == (f"MASTER_PORT {DEFAULT_MASTER_PORT} (the default) is already in use on this "
                                   f"machine; set MASTER_PORT to a free port in the environment before starting "
                                   f"the ranks")
