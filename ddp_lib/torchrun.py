"""Running a worker under real ``torchrun`` from Python (a notebook, a test) and reading back
what each rank returned; and, as torchrun's program, running one rank of a worker.

    cmd = torchrun_command(["-m", "ddp_lib", "run", "train", "--json"], nproc_per_node=2)
    job = run_torchrun(cmd)          # job.results: one result per rank, in rank order

    torchrun --nproc-per-node=2 -m ddp_lib.torchrun my_module:my_worker

Each torchrun runs with ``--log-dir`` (a temporary folder unless the command names one) and
``--redirects=3``: every rank's stdout, stderr, error and result land in a folder of its own, read
back by :mod:`ddp_lib.launch._record` (only the run folders this call's torchruns made). ``--tee=2``
also copies the ranks' stderr to torchrun's, as a person at a terminal would see it.

The parts live in :mod:`ddp_lib.launch`: ``_torchrun_command`` (the command line),
``_torchrun_jobs`` (supervision), ``_torchrun_display`` (torchrun's summary as shown) and
``_rank_side`` (a rank). Imports no torch.
"""

from __future__ import annotations

import sys

from ddp_lib.launch._rank_side import main, run_this_rank, watch_this_rank
from ddp_lib.launch._record import read_run
from ddp_lib.launch._torchrun_command import (
    _LAUNCH_VARS,
    agent_env,
    clean_env,
    command_text,
    node_commands,
    torchrun_command,
    with_log_dir,
)
from ddp_lib.launch._torchrun_display import failure_summary
from ddp_lib.launch._torchrun_jobs import (
    TorchrunJob,
    job_exit_code,
    read_job,
    run_nodes,
    run_together,
    run_torchrun,
    stop_torchruns,
)

__all__ = ["TorchrunJob", "agent_env", "clean_env", "command_text", "failure_summary", "job_exit_code",
           "node_commands", "read_job", "read_run", "run_nodes", "run_this_rank", "run_together",
           "run_torchrun", "stop_torchruns", "torchrun_command", "watch_this_rank", "with_log_dir", "_LAUNCH_VARS"]

if __name__ == "__main__":
    # python -m ddp_lib.torchrun my_module:my_worker   (as torchrun's program)
    sys.exit(main(sys.argv[1]))
