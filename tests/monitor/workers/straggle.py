"""A gloo rank of a steady job in which rank 1 straggles from step FROM to step TO.

Plain torch plus ``syncpace.attach`` with the monitor settings from the environment.
Prints ``START t run wait`` first and ``STEP s t run wait`` at each step boundary: the
wall time, so the test can line up what Prometheus scraped with the job's own steps,
and the kernel's account of this process's threads so far (seconds run, seconds
runnable but waiting for a CPU), so the test knows when the machine starved the rank.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

import syncpace

_seen: dict[str, tuple[int, int]] = {}


def cpu_so_far() -> tuple[float, float]:
    """Seconds this process's threads ran and waited runnable, ended threads kept."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
        except (OSError, ValueError):  # the thread ended under us: keep its last
            continue
        _seen[tid] = (int(run), int(wait))
    return sum(r for r, _ in _seen.values()) / 1e9, sum(w for _, w in _seen.values()) / 1e9


def main() -> None:
    steps, slow_from, slow_to = (int(a) for a in sys.argv[1:4])
    run, wait = cpu_so_far()
    print(f"START {time.time():.6f} {run:.6f} {wait:.6f}", flush=True)
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
        run, wait = cpu_so_far()
        print(f"STEP {step} {time.time():.6f} {run:.6f} {wait:.6f}", flush=True)
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
