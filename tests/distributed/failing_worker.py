"""A rank that fails before the first collective while the others wait in it (for the launcher's test)."""

import os

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    if int(os.environ["RANK"]) == 1:
        raise RuntimeError("rank 1 fails on purpose before the first collective")
    dist.barrier()  # would wait for rank 1 forever
