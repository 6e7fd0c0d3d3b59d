"""A gloo rank of a steady job: STEPS steps of compute and one all-reduce each."""

import os
import sys
import time

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    steps = int(sys.argv[1])
    syncpace.attach(os.environ["TRACE_DIR"])
    dist.init_process_group("gloo")
    x = torch.ones(64)
    for step in range(steps):
        time.sleep(0.02)
        dist.all_reduce(x)
        syncpace.step()
        print(f"STEP {step}", flush=True)
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
