"""One rank of the validation job: sleep-based compute, then sequential all-reduces.

Each step a rank sleeps ``compute_ms`` times a lognormal draw (σ ``jitter``, seeded per
rank), plus ``slow_ms`` on ``slow_rank``; then it runs ``buckets`` blocking all-reduces
of ``bucket_bytes`` and an optimizer step (which marks the step for the tracer). The
CPU is not the bottleneck, so the fabric and the planted noise set the timing.
Started by :mod:`syncpace.validate.grid` on every host of the fabric (gloo) as
``python -m syncpace.validate.worker``; it imports nothing from syncpace (the tracer
attaches from outside).
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--compute-ms", type=float, default=150.0)
    p.add_argument("--jitter", type=float, default=0.1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--buckets", type=int, default=2)
    p.add_argument("--bucket-bytes", type=int, default=256 * 1024)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=120))
    rank = dist.get_rank()
    rng = np.random.default_rng([args.seed, rank])
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.0)
    grads = [torch.zeros(args.bucket_bytes // 4) for _ in range(args.buckets)]
    dist.barrier()
    if rank == 0:
        print("validate worker: started", flush=True)
    for _ in range(args.steps):
        delay = args.compute_ms * float(np.exp(args.jitter * rng.standard_normal()))
        if rank == args.slow_rank:
            delay += args.slow_ms
        time.sleep(delay / 1e3)
        for g in grads:
            dist.all_reduce(g)
        param.grad = torch.zeros(1)
        optimizer.step()
    if rank == 0:
        print(f"validate worker: {args.steps} steps done", flush=True)
    del grads
    gc.collect()
    dist.barrier()  # nobody tears down while a peer still uses the store
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
