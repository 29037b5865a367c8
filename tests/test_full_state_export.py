"""Lesson 10's full-state-dict export: rank 0 gets every entry, as plain tensors that load into an
unsharded model; the other rank gets nothing, and gets every entry without ``cpu_offload``.
``get_state_dict`` names a DDP model's entries as the plain model's."""

from ddp_lib.demos.full_state_export import full_state_export
from ddp_lib.launch import run_ranks


def test_only_rank0_gets_a_loadable_full_state_dict():
    r0, r1 = run_ranks(full_state_export, 2, kwargs=dict(width=8, layers=1), show_output=False)
    assert r0["entries"] == 4 and r0["plain_tensors"] and r0["loads_into_plain_model"] is True
    assert r1["entries"] == 0 and r1["loads_into_plain_model"] is None
    assert r0["entries_without_offload"] == r1["entries_without_offload"] == 4
    assert r0["ddp_names_plain"] and r1["ddp_names_plain"]
