"""Lesson 03's source verdicts: DDP's constructor tests device_ids only for being None, empty or
longer than one, and torch.distributed never calls set_device."""

from ddp_lib.demos import device_checks


def test_ddp_never_compares_device_ids_with_the_module_device():
    tests, reads_module_device = device_checks.device_ids_tests()
    assert any("len(device_ids)" in t for t in tests)
    assert not reads_module_device


def test_the_check_notices_a_test_that_reads_the_module_device(monkeypatch):
    source = "def __init__(self, device_ids):\n    if device_ids[0] != self.device :\n        pass\n"
    monkeypatch.setattr(device_checks.inspect, "getsource", lambda _: source)
    assert device_checks.device_ids_tests()[1]


def test_init_process_group_calls_no_set_device():
    assert device_checks.set_device_calls() == []
