"""One rank of the pacing benchmark (launched by pacing.py under the syncpace bootstrap).

Each step: CPU work (matrix products; rank 0 does ``early_share`` of the others' work,
with lognormal jitter per rank and step), then a 1 MiB all-reduce, then a step mark.
Prints the per-step wall times from rank 0 as JSON.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    steps, work = int(sys.argv[1]), int(sys.argv[2])
    early_share, jitter = float(sys.argv[3]), float(sys.argv[4])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rng = np.random.default_rng(1000 + rank)
    a = torch.randn(96, 96)
    grad = torch.ones(64 * 1024)
    times = []
    for _ in range(steps + 5):
        t0 = time.perf_counter()
        n = work * (early_share if rank == 0 else 1.0) * rng.lognormal(0.0, jitter)
        for _ in range(max(int(n), 1)):
            a = torch.tanh(a @ a)
        dist.all_reduce(grad)
        syncpace.step()
        times.append(time.perf_counter() - t0)
    gc.collect()
    if rank == 0:
        print(json.dumps(times[5:]), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
