"""A gloo rank of a steady job in which rank 1 straggles from step FROM to step TO.

Plain torch plus ``syncpace.attach`` with the monitor settings from the environment.
Prints ``STEP s t`` (the wall time of each step boundary) so the test can line up
what Prometheus scraped with the job's own steps.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    steps, slow_from, slow_to = (int(a) for a in sys.argv[1:4])
    syncpace.attach(os.environ["TRACE_DIR"])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(256)
    for step in range(steps):
        time.sleep(0.03)  # compute
        if rank == 1 and slow_from <= step < slow_to:
            time.sleep(0.02)
        dist.all_reduce(x)
        syncpace.step()
        print(f"STEP {step} {time.time():.6f}", flush=True)
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
