"""Write the small checkpoint lesson 03 loads, as a GPU rank would have saved it, on any machine.

    python tools/make_cuda_checkpoint.py notebooks/data/saved_on_cuda0.pt

torch.save records each tensor's storage location as a string, asked of the taggers registered with
torch.serialization.register_package (lowest priority first). A tagger that answers "cuda:0" makes the
file identical in form to one saved from cuda:0; loading it without map_location on a machine without
CUDA then raises torch's own "Attempting to deserialize object on a CUDA device" error.
"""

import sys

import torch
import torch.serialization


def _saved_on_cuda0(storage) -> str:
    return "cuda:0"


def _never_used(obj, location):  # register_package needs a deserializer; this process only saves
    return None


if __name__ == "__main__":
    torch.serialization.register_package(-100, _saved_on_cuda0, _never_used)  # before torch's own "cpu" tagger
    torch.manual_seed(0)
    torch.save({"weight": torch.randn(2, 3).round(decimals=2), "bias": torch.zeros(2)}, sys.argv[1])
