"""Two gloo ranks exchanging small all-reduces for SECONDS, one every 50 ms, traced."""

import gc
import os
import sys
import time

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    seconds = float(sys.argv[1])
    syncpace.attach(os.environ["TRACE_DIR"], flush_interval_s=0.05)
    dist.init_process_group("gloo")
    x = torch.ones(16)
    # A count both ranks agree on: a loop on each rank's own clock can end one call
    # apart, and then one rank's barrier meets the other's all-reduce.
    for _ in range(int(seconds / 0.05)):
        dist.all_reduce(x)
        time.sleep(0.05)  # pacing of the workload, not synchronisation
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
