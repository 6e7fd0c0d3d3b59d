"""A job whose ranks take different times before the step's sync point.

argv: STEPS EARLY_MS LATE_MS [KILL_RANK KILL_STEP]. Rank 0 "computes" EARLY_MS per step,
the others LATE_MS, then every rank all-reduces (the sync point) and marks the step.
"""

import gc
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    steps, early_ms, late_ms = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    kill_rank, kill_step = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (-1, -1)
    syncpace.attach(os.environ["TRACE_DIR"], flush_interval_s=0.2, step_hook=False)
    dist.init_process_group(
        "gloo", timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "60")))
    )
    rank = dist.get_rank()
    x = torch.ones(256)
    for step in range(steps):
        if rank == kill_rank and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep((early_ms if rank == 0 else late_ms) / 1000)
        dist.all_reduce(x)
        syncpace.step()
    gc.collect()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
