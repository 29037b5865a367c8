"""Lesson 03's verdicts: DDP's constructor tests device_ids only for being None, empty or longer than
one (never an entry), DDP uses self.output_device only while it is built, and the module defining
init_process_group never changes the current device."""

from ddp_lib.demos import device_checks


def test_ddp_never_reads_an_entry_of_device_ids_in_a_test():
    tests, reads_an_entry = device_checks.device_ids_tests()
    assert any("len(device_ids)" in t for t in tests)
    assert any("self.device_type" in t for t in tests)  # the type is read, the index is not
    assert not reads_an_entry


def test_the_check_notices_a_test_that_reads_an_entry(monkeypatch):
    for condition in ("device_ids[0] != self.device", "self.device.index not in device_ids"):
        source = f"def __init__(self, device_ids):\n    if {condition}:\n        pass\n"
        monkeypatch.setattr(device_checks.inspect, "getsource", lambda _, source=source: source)
        assert device_checks.device_ids_tests()[1], condition


def test_ddp_uses_output_device_only_while_it_is_built():
    uses = device_checks.output_device_uses()
    assert ("__init__", "sets", "self.output_device = None") in uses
    assert any(kind == "reads" for _, kind, _ in uses)
    assert {function for function, _, _ in uses} <= {"__init__", "_ddp_init_helper"}


def test_init_process_group_calls_no_set_device():
    assert device_checks.set_device_calls() == []


def test_the_search_notices_each_way_to_change_the_current_device(monkeypatch):
    for call in ("torch.cuda.set_device(device_id)", "torch.accelerator.set_device_index(device_id)",
                 "torch.cuda.device(device_id)", "torch.accelerator.device_index(device_id)"):
        source = f"def init_process_group(device_id):\n    {call}\n"
        monkeypatch.setattr(device_checks.inspect, "getsource", lambda _, source=source: source)
        assert device_checks.set_device_calls() == [f"init_process_group: {call}"], call
    source = "def init_process_group(device_id):\n    torch.device(device_id)\n    torch.cuda.current_device()\n"
    monkeypatch.setattr(device_checks.inspect, "getsource", lambda _, source=source: source)
    assert device_checks.set_device_calls() == []  # making a device or reading the current one changes nothing
