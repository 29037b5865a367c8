"""What lesson 03's GPU-only cells would give on a GPU machine, for readers without one: torch's and
nccl's messages quoted word for word, each with where it comes from. Where torch's own files hold the
fixed words of a message, ``checks`` tests that they are there in the installed torch, so a quote that
torch stops printing is noticed. The cases one GPU can show were also recorded on a GPU machine
(``tools/record_gpu_quotes.py``, kept in ``recorded/gpu_quotes.json``). ``quote`` gives the box, whose
one header line says what it is: a recording (which GPU count and torch), or expected from torch's source,
with the part a GPU recorded named, or none recorded;
``provenance`` names its source and that recording (torch version and GPU count), or says there is
none; ``checks`` says whether the recorded words hold the quoted ones."""

from __future__ import annotations

import json
import mmap
from pathlib import Path
from typing import NamedTuple

import torch


class Quote(NamedTuple):
    lines: tuple[str, ...]           # what the GPU cell prints there, word for word (no placeholders)
    source: str                      # where the words come from, in plain words
    torch_file: str | None = None    # a file of the installed torch that holds the fixed words
    fixed_words: tuple[str, ...] = ()  # the parts of the message that do not vary
    unchecked_why: str = ""          # for a quote with no torch file: why it cannot be checked here
    recorded_words: tuple[str, ...] = ()  # what a recording on a GPU must hold (default: fixed_words)
    gpus: int = 2                    # how many GPUs the quoted machine has
    words_are: str = "torch's words"  # what fixed_words are: a message, a source line or a documented rule
    recorded_part: str = ""          # what a recording on fewer GPUs, or in other lines, printed of it
    box_part: str = ""               # the same, in two or three words, for the box's header ("rank 0's line")


QUOTES: dict[str, Quote] = {
    "input_moved_by_ddp": Quote(
        ("rank 0: model on cuda:0, input arrived on cuda:0, output on cuda:0",
         "rank 1: model on cuda:1, input arrived on cuda:1, output on cuda:1"),
        "DDP's forward, which moves the inputs of a module on one GPU to device_ids[0] before calling it",
        "nn/parallel/distributed.py",
        ("moved_inputs, moved_kwargs = _to_kwargs(",),
        recorded_words=("input arrived on cuda:0",),
        words_are="the source line these lines are built from",
        recorded_part="rank 0's line", box_part="rank 0's line"),
    "input_not_moved": Quote(
        ("input not moved: RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu,",
         "  different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
         "input moved with .to(device): ['cuda:0', 'cuda:1']"),
        "the device check torch runs before an operator's GPU kernel",
        "lib/libtorch_cpu.so",
        ("Expected all tensors to be on the same device, but got ", ", different from other tensors on ",
         " (when checking argument in method "),
        recorded_part="the error, on cuda:0", box_part="the error"),
    "device_id_out_of_range": Quote(
        ("ValueError: device_id cuda:2 is out of range. Please use a device index less than the number of "
         "accelerators available: 2.",),
        "init_process_group's check of device_id, on a node with 2 GPUs",
        "distributed/distributed_c10d.py",
        ("is out of range. Please use a device index less than ", "the number of accelerators available: "),
        recorded_part="the same error, for cuda:1 on 1 GPU", box_part="the error's wording"),
    "barrier_warning": Quote(
        ("UserWarning: barrier(): using the device under current context. You can specify `device_id` in "
         "`init_process_group` to mute this warning.",),
        "torch.distributed.barrier, on rank 0 of an nccl group given neither device_id= nor device_ids=",
        "distributed/distributed_c10d.py",
        ("barrier(): using the device under current context. ",
         "You can specify `device_id` in `init_process_group` to mute this warning."),
        gpus=1),  # rank 0's warning, the same on any number of GPUs
    "device_id_without_index": Quote(
        ('init_process_group(device_id=torch.device("cuda")): ValueError: Please use a device_id with index.',),
        "init_process_group's check of device_id, on a machine with CUDA",
        "distributed/distributed_c10d.py",
        ("Please use a device_id with index.",),
        recorded_part="the error message", box_part="the error"),
    "set_device_out_of_range": Quote(
        ("rank 1: torch.cuda.set_device(1): AcceleratorError: CUDA error: invalid device ordinal",),
        "CUDA's error for a GPU index the process does not see, on a node with 2 GPUs where each rank's "
        "CUDA_VISIBLE_DEVICES lists only its own GPU",
        "testing/_internal/distributed/nn/api/remote_module_test.py",
        ("CUDA error: invalid device ordinal",),
        words_are="the words torch's own tests expect for a GPU index beyond the GPUs seen"),
    "visible_devices": Quote(
        ("CUDA_VISIBLE_DEVICES=(not set)  -> torch.cuda.device_count() = 4",
         "CUDA_VISIBLE_DEVICES=2,3        -> torch.cuda.device_count() = 2"),
        "CUDA's documented meaning of CUDA_VISIBLE_DEVICES, on a machine with 4 GPUs; "
        "torch.cuda.device_count applies it itself",
        "cuda/__init__.py",
        ('var = os.getenv("CUDA_VISIBLE_DEVICES")',),
        gpus=4, words_are="the source line these lines are built from"),
    "duplicate_gpu": Quote(
        ("without set_device: DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93,",
         "  invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9",
         "  ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
         "  Last error:",
         "  Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60",
         "with set_device, current device per rank: [0, 1]"),
        "nccl's own check when it forms a communicator (in nccl's source), raised by torch as DistBackendError",
        unchecked_why="the words are nccl's, and this CPU build of torch has no nccl",
        recorded_words=("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                        "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"),
        recorded_part="the error, with 2 ranks on 1 GPU", box_part="the error"),
    "bound_device": Quote(
        ("device_id given: False  bound device per rank: [None, None]  all-reduce sums: [2.0, 2.0]",
         "device_id given: True   bound device per rank: ['cuda:0', 'cuda:1']  all-reduce sums: [2.0, 2.0]"),
        "init_process_group, which sets bound_device_id from device_id and nothing else",
        "distributed/distributed_c10d.py",
        ("pg.bound_device_id = device_id",),
        words_are="the source line these lines are built from",
        recorded_words=("device_id given: False  bound device: None", "device_id given: True  bound device: cuda:0"),
        recorded_part="rank 0's two answers, in shorter lines", box_part="rank 0's answers"),
    "nccl_cpu_tensor": Quote(
        ("RuntimeError: No backend type associated with device type cpu",),
        "the process group's lookup of the backend for a tensor's device type, the same lookup that "
        "section 2's stand-in for nccl (folded) reaches",
        "lib/libtorch_cpu.so",
        ("No backend type associated with device type ",)),
    "checkpoint_on_gpus": Quote(
        ("rank 0: saved on ['cuda:0']; loaded without map_location -> cuda:0; with map_location=device -> cuda:0",
         "rank 1: saved on ['cuda:0']; loaded without map_location -> cuda:0; with map_location=device -> cuda:1"),
        "torch.load's documentation: without map_location, tensors go back to the device they were saved from",
        "serialization.py",
        ("are then moved to the device they were saved from",),
        recorded_words=("rank 0: saved on ['cuda:0']; loaded without map_location -> cuda:0; "
                        "with map_location=device -> cuda:0",),
        recorded_part="rank 0's line", box_part="rank 0's line",
        words_are="the documented rule these lines are built from"),
}


def words_in_torch(quote: Quote) -> bool:
    """Whether every one of ``quote.fixed_words`` is in ``quote.torch_file`` of the installed torch
    (read as bytes: a compiled library holds its messages as plain strings)."""
    path = Path(torch.__file__).parent / quote.torch_file
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return all(data.find(words.encode()) >= 0 for words in quote.fixed_words)


RECORDED = Path(__file__).parent / "recorded" / "gpu_quotes.json"


def recorded_line(key: str) -> str | None:
    """One line on the recording of ``key`` on a GPU machine, and whether it holds the quoted words
    (None: not recorded, as for the cases that need more than one GPU)."""
    record = json.loads(RECORDED.read_text())
    if key not in record["cases"]:
        return None
    q, seen = QUOTES[key], "\n".join(record["cases"][key])
    held = all(words in seen for words in q.recorded_words or q.fixed_words)
    return (f"Recorded on an {record['gpu']} ({record['gpus']} GPU, torch {record['torch']}, NCCL {record['nccl']}) "
            f"by tools/record_gpu_quotes.py: the quoted words are in what it printed: {'yes' if held else 'NO'}")


def recording_check(key: str) -> str:
    """A few words on the recording of ``key`` on a GPU machine, for the quote's last line."""
    record = json.loads(RECORDED.read_text())
    if key not in record["cases"]:
        return "not recorded on a GPU"
    held = recorded_line(key).endswith(": yes")
    return (f"a recording on {record['gpus']} GPU with torch {record['torch'].split('+')[0]} holds these words: "
            + ("yes" if held else "NO"))


def recorded_in_full(key: str, record: dict) -> bool:
    """Whether a GPU machine printed every line of the quote of ``key`` word for word."""
    if key not in record["cases"]:
        return False
    seen = "\n".join(record["cases"][key])
    return all(line.strip() in seen for line in QUOTES[key].lines)


def _gpus(n: int) -> str:
    return f"{n} GPU" + "s" * (n != 1)


def quote(key: str) -> str:
    """The text a GPU-only cell prints in place of a run: one short header line, then the quoted lines.
    The header says the cell did not run here, and whether a GPU machine printed every line ("Recorded
    on 1 GPU (torch ...):"), or the lines are built from torch's source ("Expected on 2 GPUs (torch's source)")
    with part of them recorded, named ("; rank 0's line recorded on 1 GPU (torch ...):") or none ("; not
    recorded on a GPU:").
    ``provenance`` names the source and the recording in full, ``checks`` how far to trust them."""
    q = QUOTES[key]
    gpus_here = torch.cuda.device_count()
    # Quoted on every machine, so that the lesson prints the same everywhere; the header says which case this is.
    here = "no GPU" if gpus_here == 0 else f"this machine has {_gpus(gpus_here)}"
    record = json.loads(RECORDED.read_text())
    gpus, version = _gpus(record["gpus"]), record["torch"].split("+")[0]
    if recorded_in_full(key, record):  # evidence: a GPU machine printed every line
        what = f"Recorded on {gpus} (torch {version}):"
    elif key in record["cases"]:  # built from the source; a GPU machine printed part of it, named here
        what = f"Expected on {_gpus(q.gpus)} (torch's source); {q.box_part} recorded on {gpus} (torch {version}):"
    else:  # built from the source alone
        what = f"Expected on {_gpus(q.gpus)} (torch's source); not recorded on a GPU:"
    text = [f"Not run here ({here}). {what}"]
    text += ["  " + line for line in q.lines]
    return "\n".join(text)


def provenance(key: str) -> str:
    """Where the quote of ``key`` comes from, and what a GPU machine recorded of it, in two or three lines."""
    q = QUOTES[key]
    record = json.loads(RECORDED.read_text())
    text = [f"Source: {q.source}."]
    if key not in record["cases"]:
        text.append("Not recorded on a GPU: built from the source above.")
        return "\n".join(text)
    what = "every line of the box" if recorded_in_full(key, record) else q.recorded_part
    text.append(f"Recorded on {_gpus(record['gpus'])} (torch {record['torch'].split('+')[0]}): {what}.")
    if q.gpus > record["gpus"] and len(q.lines) > 1:
        text.append(f"Not recorded: the lines that need {_gpus(q.gpus)}.")
    return "\n".join(text)


def checks(key: str) -> str:
    """How far to trust the quote of ``key``, in one line: whether a recording on a GPU holds its words,
    and, where torch's files hold the fixed words, whether this torch has them."""
    q = QUOTES[key]
    lines = [recording_check(key)]
    if q.torch_file:
        found = "yes" if words_in_torch(q) else "NO (this torch words it differently)"
        lines.append(f"the installed torch holds {q.words_are}: {found}")
    elif q.unchecked_why:
        lines.append(f"not checked here: {q.unchecked_why}")
    return "Checks: " + "; ".join(lines) + "."
