"""Teaching PyTorch DistributedDataParallel: launcher, process groups, workers, plots, benchmarks."""

__version__ = "0.1.0"
