"""One rank of the stall-latency benchmark (launched by stall_latency.py).

Rank 0 issues all-reduces; rank 1 stops before its CALLS-th one and sleeps until it is
killed. Both are traced with the stall watchdog at the threshold given.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import syncpace

CALLS = 20


def main() -> None:
    out, after = sys.argv[1], float(sys.argv[2])
    syncpace.attach(out, stall_after_s=after, stall_repeat_s=max(after / 2, 0.5))
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    x = torch.ones(1024)
    for i in range(CALLS):
        if i == CALLS - 1 and dist.get_rank() == 1:
            time.sleep(3600)
        dist.all_reduce(x)
    os._exit(0)


if __name__ == "__main__":
    main()
