"""Lesson 03's demos: each quoted GPU outcome says it is quoted and where it comes from, torch's own
words for it are still in the installed torch wherever a torch file is named, and the helpers that read
CUDA_VISIBLE_DEVICES and torch's documentation return what torch says."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ddp_lib.demos import gpu_outcomes, placement_demos
from ddp_lib.demos.gpu_outcomes import QUOTES, Quote


@pytest.mark.parametrize("key", sorted(QUOTES))
def test_each_quote_is_labelled_and_names_its_source(key):
    text = gpu_outcomes.quote(key)
    assert text.startswith("Not run here (no GPU). ")
    assert text.splitlines()[1:] == ["  " + line for line in QUOTES[key].lines]  # one header, then the lines
    assert gpu_outcomes.provenance(key).startswith(f"Source: {QUOTES[key].source}.")


@pytest.mark.parametrize("key", sorted(QUOTES))
def test_each_quote_names_the_gpu_count_of_its_own_machine(key):
    quote = QUOTES[key]
    text = gpu_outcomes.quote(key)
    record = json.loads(gpu_outcomes.RECORDED.read_text())
    gpus = f"{quote.gpus} GPU" + "s" * (quote.gpus != 1)
    header = text.splitlines()[0]
    if gpu_outcomes.recorded_in_full(key, record):  # a recording names the GPUs of the machine that made it
        assert re.search(f"Recorded on {record['gpus']} GPUs? \\(torch [0-9.]+\\):$", header)
    else:
        assert f" Expected on {gpus} (torch's source); " in header
    assert all(int(n) == quote.gpus for n in re.findall(r"with (\d+) GPUs", quote.source)), quote.source


def test_the_visible_devices_quote_is_from_a_machine_with_four_gpus():
    # with the variable unset, the child counts every GPU of the machine the quote comes from
    text = gpu_outcomes.quote("visible_devices")
    assert text.splitlines()[0] == "Not run here (no GPU). Expected on 4 GPUs (torch's source); not recorded on a GPU:"
    assert "CUDA_VISIBLE_DEVICES=(not set)  -> torch.cuda.device_count() = 4" in text


@pytest.mark.parametrize("key", sorted(k for k, q in QUOTES.items() if q.torch_file))
def test_torchs_words_for_each_checkable_quote_are_in_the_installed_torch(key):
    quote = QUOTES[key]
    assert quote.fixed_words, "a quote that names a torch file names the words to look for"
    quoted = " ".join(" ".join(quote.lines).split())  # a message quoted over two lines reads as one
    if "Error:" in quoted:  # a quoted message holds the fixed words it is checked by
        assert all(" ".join(words.split()) in quoted for words in quote.fixed_words)
    assert gpu_outcomes.words_in_torch(quote)
    assert gpu_outcomes.checks(key).endswith(f"the installed torch holds {quote.words_are}: yes.")


def test_the_check_notices_words_torch_does_not_have():
    invented = Quote(("ValueError: no such message",), "nowhere", "distributed/distributed_c10d.py",
                     ("this sentence is in no torch file at all 7f3a",))
    assert not gpu_outcomes.words_in_torch(invented)


def test_visible_gpus_are_torchs_reading_of_the_variable_in_order():
    assert placement_demos.visible_gpus("2,3") == [2, 3]
    assert placement_demos.visible_gpus("1,0") == [1, 0]
    assert placement_demos.visible_gpus("0,-1,2") == [0]  # a negative number ends the list


def test_device_id_check_runs_torchs_own_range_check_and_makes_no_group():
    assert placement_demos.device_id_check(torch.device("cuda", 1), gpus=2) == "accepted"
    assert placement_demos.device_id_check(torch.device("cuda", 2), gpus=2) == (
        "ValueError: device_id cuda:2 is out of range. Please use a device index less than "
        "the number of accelerators available: 2.")
    assert placement_demos.device_id_check(torch.device("cuda"), gpus=2) == (
        "ValueError: Please use a device_id with index.")
    assert not dist.is_initialized()  # stopped before any group was made
    assert torch.accelerator.current_accelerator() is None  # the fakes are gone (a CPU build)


def test_device_id_verdict_is_the_checks_first_sentence():
    assert placement_demos.device_id_verdict("cuda:1") == "accepted"
    assert placement_demos.device_id_verdict("cuda:3") == "ValueError: device_id cuda:3 is out of range"
    assert placement_demos.device_id_verdict(torch.device("cuda", 3), gpus=4) == "accepted"
    assert not dist.is_initialized()


def test_documented_returns_the_paragraph_torch_documents():
    text = placement_demos.documented(dist.init_process_group, "device_id (torch.device")
    assert "the communicator is immediately formed" in text
    assert "_ranks:" not in text  # the next parameter is not part of the paragraph
    with pytest.raises(RuntimeError, match="changed"):
        placement_demos.documented(dist.init_process_group, "no such parameter")


def test_every_case_recorded_on_a_gpu_holds_the_quoted_words():
    import json

    record = json.loads(gpu_outcomes.RECORDED.read_text())
    assert set(record["cases"]) <= set(QUOTES) and record["gpus"] >= 1
    for key in record["cases"]:
        assert gpu_outcomes.recorded_line(key).endswith("the quoted words are in what it printed: yes"), key
    assert gpu_outcomes.recorded_line("checkpoint_on_gpus") is None  # needs 2 GPUs: not recorded on one


def test_a_recording_without_the_quoted_words_says_no(tmp_path, monkeypatch):
    import json

    fake = tmp_path / "gpu_quotes.json"
    fake.write_text(json.dumps({"gpu": "GPU", "gpus": 1, "torch": "0", "nccl": "0",
                                "cases": {"barrier_warning": ["UserWarning: some other words"]}}))
    monkeypatch.setattr(gpu_outcomes, "RECORDED", fake)
    assert gpu_outcomes.recorded_line("barrier_warning").endswith("in what it printed: NO")


def test_the_quote_label_names_the_gpus_of_a_machine_that_has_some(monkeypatch):
    assert gpu_outcomes.quote("barrier_warning").startswith("Not run here (no GPU). ")
    monkeypatch.setattr(gpu_outcomes.torch.cuda, "device_count", lambda: 1)
    assert gpu_outcomes.quote("barrier_warning").startswith("Not run here (this machine has 1 GPU). ")
    monkeypatch.setattr(gpu_outcomes.torch.cuda, "device_count", lambda: 2)
    assert gpu_outcomes.quote("checkpoint_on_gpus").startswith("Not run here (this machine has 2 GPUs). ")


def test_the_box_header_is_one_short_line():
    # where the words come from is printed by provenance and checks, not in the box
    for key in QUOTES:
        header = gpu_outcomes.quote(key).splitlines()[0]
        assert len(header.split()) <= 20, header


@pytest.mark.parametrize("key", sorted(QUOTES))
def test_each_quote_names_its_recording_or_says_there_is_none(key):
    record = json.loads(gpu_outcomes.RECORDED.read_text())
    lines = gpu_outcomes.provenance(key).splitlines()
    source = next(i for i, line in enumerate(lines) if line.startswith("Source: "))
    after = lines[source + 1:]
    if key not in record["cases"]:
        assert after == ["Not recorded on a GPU: built from the source above."]
    else:
        torch_version = record["torch"].split("+")[0]
        assert after[0].startswith(f"Recorded on {record['gpus']} GPU (torch {torch_version}): ")
        assert not after[0].endswith("): .")  # it names what was recorded
        needs_more = QUOTES[key].gpus > record["gpus"] and len(QUOTES[key].lines) > 1
        assert after[1:] == ([f"Not recorded: the lines that need {QUOTES[key].gpus} GPUs."] if needs_more else [])
    assert gpu_outcomes.quote(key).count("Source:") == 0  # the box itself carries no provenance


@pytest.mark.parametrize("key", sorted(QUOTES))
def test_a_box_says_plainly_whether_it_was_recorded_or_built_from_source(key):
    record = json.loads(gpu_outcomes.RECORDED.read_text())
    lines = gpu_outcomes.quote(key).splitlines()
    torch_version = record["torch"].split("+")[0]
    if gpu_outcomes.recorded_in_full(key, record):
        assert lines[0] == f"Not run here (no GPU). Recorded on {record['gpus']} GPU (torch {torch_version}):"
    elif key in record["cases"]:  # built from torch's source, part of it recorded; provenance says which part
        assert lines[0] == (f"Not run here (no GPU). Expected on {QUOTES[key].gpus} GPUs (torch's source); "
                            f"{QUOTES[key].box_part} recorded on {record['gpus']} GPU (torch {torch_version}):")
        assert QUOTES[key].box_part, "a box recorded in part names the recorded lines in its header"
    else:  # built from torch's source alone: the box says that no GPU printed any of it
        assert lines[0] == (f"Not run here (no GPU). Expected on {QUOTES[key].gpus} GPUs (torch's source); "
                            "not recorded on a GPU:")
    assert not re.search(r"<[a-z ]+>|\.\.\.", "\n".join(lines[1:])), "no placeholder a learner could take for output"


@pytest.mark.parametrize("key", sorted(QUOTES))
def test_a_box_says_expected_unless_a_gpu_machine_printed_all_its_lines(key):
    record = json.loads(gpu_outcomes.RECORDED.read_text())
    seen = "\n".join(record["cases"].get(key, ()))
    full = key in record["cases"] and all(line.strip() in seen for line in QUOTES[key].lines)
    header = gpu_outcomes.quote(key).splitlines()[0]
    assert (" Recorded on " in header) == full and (" Expected on " in header) == (not full)
    if key in record["cases"]:
        recorded = next(line for line in gpu_outcomes.provenance(key).splitlines() if line.startswith("Recorded on "))
        assert recorded.endswith(": every line of the box.") == full
        assert full or QUOTES[key].recorded_part, "a box recorded in part says which part"


def test_the_out_of_range_box_is_expected_and_recorded_in_part():
    # The recording ran on 1 GPU with cuda:1; the box quotes cuda:2 on a node with 2 GPUs.
    header = gpu_outcomes.quote("device_id_out_of_range").splitlines()[0]
    assert " Expected on 2 GPUs (torch's source); the error's wording recorded on 1 GPU (torch " in header


def test_barrier_warnings_returns_the_warnings_of_a_real_barrier():
    # on a CPU, gloo: the barrier runs on the CPU and warns nothing; under nccl rank 0 warns (GPU only)
    from ddp_lib.launch import run_ranks

    assert run_ranks(placement_demos.barrier_warnings, 2, kwargs=dict(backend="gloo"), show_output=False) == [[], []]


def test_the_recording_tool_records_every_quote_one_gpu_can_show():
    # tools/record_gpu_quotes.py runs on a GPU machine; here only its list of cases is read
    spec = importlib.util.spec_from_file_location(
        "record_gpu_quotes", Path(__file__).parents[1] / "tools" / "record_gpu_quotes.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert set(tool.CASES) <= set(QUOTES)
    assert {"nccl_cpu_tensor", "set_device_out_of_range", "checkpoint_on_gpus"} <= set(tool.CASES)
    assert QUOTES["checkpoint_on_gpus"].box_part == "rank 0's line"  # one GPU records rank 0's line only


def test_ddp_of_a_cpu_model_fails_in_the_constructor_without_a_cpu_backend():
    assert placement_demos.ddp_of_cpu_model_in_group("cuda:gloo") == (
        "RuntimeError: No backend type associated with device type cpu")
    assert placement_demos.ddp_of_cpu_model_in_group("cpu:gloo,cuda:gloo") == "no error"
    assert not dist.is_initialized()


def test_no_backend_name_gives_one_backend_for_the_accelerator_only():
    assert placement_demos.backends_without_a_name("cuda") == {"cuda": "nccl"}
    if torch.version.cuda is None:  # a CPU-only build: its own accelerator is the CPU
        assert placement_demos.backends_without_a_name() == {"cpu": "gloo"}


def test_mp_spawn_sets_none_of_the_launch_variables():
    seen = placement_demos.launch_variables_under_spawn(2)
    assert seen == {0: [], 1: []}
