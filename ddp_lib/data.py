"""Generated datasets for the training lessons; defined in ``ddp_lib/workers/train.py`` (so
that file runs on its own), named here too."""

from ddp_lib.workers.train import DATA_SEED, N_SAMPLES, make_moons

__all__ = ["DATA_SEED", "N_SAMPLES", "make_moons"]
