"""ddp_lib.demos.stale_store, as lesson 06 runs it: in a fresh Python."""

import re
import subprocess
import sys


def test_stale_key_makes_the_new_rank_0_fail_and_a_fresh_store_makes_it_wait():
    run = subprocess.run([sys.executable, "-m", "ddp_lib.demos.stale_store"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "keys attempt 0 left in the shared store: 2, one per rank"
    assert re.fullmatch(r"attempt 1, same store: rank 0 read rank 1's old address, then failed after [\d.]+ s: "
                        r"Gloo connectFullMesh failed with (timed out connecting: SO_ERROR: Connection refused"
                        r"|Connect timeout)", lines[1]), lines[1]
    assert lines[2].startswith("attempt 1, fresh store: rank 0 waited for rank 1 until its 0.5-s timeout: True")
