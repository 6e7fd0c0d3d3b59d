"""One gloo rank that issues COUNT all-reduces, then exits or waits to be signalled."""

import gc
import os
import sys

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    count, mode = int(sys.argv[1]), sys.argv[2]
    syncpace.attach(os.environ["TRACE_DIR"], flush_interval_s=0.05)
    dist.init_process_group("gloo")
    x = torch.ones(16)
    for _ in range(count):
        dist.all_reduce(x)
    print(f"ISSUED {count}", flush=True)
    if mode == "wait":
        sys.stdin.read()  # returns when the test closes stdin; signals arrive first
    gc.collect()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
