"""STEPS iterations of STEP_MS of "compute" and one all-reduce, traced when TRACE_DIR is set.

Prints ``ATTACHED_S`` (seconds from start to a usable default group) and ``WORKER_DONE``.
"""

import gc
import os
import sys
import time

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    steps, step_ms = int(sys.argv[1]), float(sys.argv[2])
    start = time.monotonic()
    if os.environ.get("TRACE_DIR"):
        syncpace.attach(os.environ["TRACE_DIR"], flush_interval_s=0.2, step_hook=False)
    dist.init_process_group("gloo")
    print(f"ATTACHED_S {time.monotonic() - start:.3f}", flush=True)
    x = torch.ones(256)
    for _ in range(steps):
        time.sleep(step_ms / 1000)
        dist.all_reduce(x)
        syncpace.step()
    gc.collect()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
