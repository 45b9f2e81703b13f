"""A 3-rank torch.distributed (gloo) job where rank $FAIL_RANK raises at step 2 and its peers then
fail in all_reduce because it vanished.  Run by Corral's kernels with Corral's MASTER_ADDR/PORT,
RANK and WORLD_SIZE; `--record` wraps main in torch elastic's own @record."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group(
        "gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=20)
    )
    t = torch.ones(4)
    for step in range(6):
        if step == 2 and rank == int(os.environ["FAIL_RANK"]):
            raise ValueError(f"bad batch at step {step} on rank {rank}")
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    (record(main) if "--record" in sys.argv else main)()
