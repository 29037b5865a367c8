"""Lesson 06, exercise 1: where this rank runs, read from what torchrun sets."""

import os


def launch_info(rank: int, world_size: int) -> dict:
    # torchrun sets every one of these; LOCAL_RANK is not RANK once a node runs several ranks,
    # and GROUP_RANK is this node's place among the nodes. Environment values are strings.
    return {"world_size": int(os.environ["WORLD_SIZE"]),
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
            "node_rank": int(os.environ["GROUP_RANK"])}
