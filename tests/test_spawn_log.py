"""ddp_lib.demos.spawn_log: torch's launcher's warnings, collected without process ids."""

import logging

from ddp_lib.demos.spawn_log import SPAWN_LOGGER, torch_spawn_warnings


def test_collects_the_launchers_warnings_and_restores_the_logger(caplog):
    log = logging.getLogger(SPAWN_LOGGER)
    with torch_spawn_warnings() as messages:
        log.warning("Terminating process %s via signal SIGTERM", 12345)
        assert messages == []  # filled when the block ends
    assert messages == ["Terminating process PID via signal SIGTERM"]
    assert log.propagate and not any("Terminating" in r.getMessage() for r in caplog.records)
