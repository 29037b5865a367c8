"""Beyond one machine, for real, on one Linux machine as root: hosts with their own network
(``hosts``), the first-cluster mistakes run on them (``mistakes``), and a one-machine SLURM
cluster (``slurm``)."""
