"""A DDP job profiled by torch.profiler the way users profile theirs; no syncpace import.

The tests run it with syncpace armed from outside (the autoload environment), so one run
yields both a syncpace trace and the profiler's Kineto traces. Two profiling phases, one
after the other, as a user would profile a job twice:

1. ``--steps`` steps under a scheduled profiler (wait 1, warmup 1, then active) with
   ``with_stack``, written gzip'd by ``tensorboard_trace_handler`` into ``OUT/stack``;
2. ``--steps`` more under a profiler with no schedule (no ``ProfilerStep#``: iterations
   show only as ``Optimizer.step#`` spans), exported with ``export_chrome_trace`` into
   ``OUT/plain``.

Both record shapes. ``--slow-rank`` sleeps ``--slow-ms`` more per step: the straggler.

Around each phase the wall clock minus ``CLOCK_MONOTONIC`` is measured and written to
``OUT/clock/rankR.json``: the profiler's timestamps are the wall clock (converted from
the TSC against pairs it measures at its start and end), so with the tracer's anchor
(``clock.base_ns`` in its metadata) this says exactly where one timeline lies on the
other.
"""

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def wall_minus_monotonic() -> int:
    """The wall clock minus ``CLOCK_MONOTONIC`` (ns): the tightest of many reads, each
    wall read set against the midpoint of two monotonic reads around it."""
    best = None
    for _ in range(64):
        before, wall, after = time.monotonic_ns(), time.time_ns(), time.monotonic_ns()
        if best is None or after - before < best[1]:
            best = (wall - (before + after) // 2, after - before)
    return best[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--compute-ms", type=float, default=4.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    sub = dist.new_group([0, 1])
    gen = torch.Generator().manual_seed(rank)
    slow = args.slow_ms if rank == args.slow_rank else 0.0

    def step(prof) -> None:
        x = torch.randn(16, 64, generator=gen)
        time.sleep((args.compute_ms + slow) / 1000)
        opt.zero_grad(set_to_none=True)
        ddp(x).sum().backward()
        opt.step()
        if rank in (0, 1):
            dist.all_reduce(torch.ones(8), group=sub)
        prof.step()

    clock = {}
    cpu = [torch.profiler.ProfilerActivity.CPU]
    stack_dir, plain_dir = os.path.join(args.out, "stack"), os.path.join(args.out, "plain")
    clock["stack"] = [wall_minus_monotonic()]
    with torch.profiler.profile(
        activities=cpu,
        record_shapes=True,
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            stack_dir, worker_name=f"rank{rank}", use_gzip=True
        ),
    ) as prof:
        for _ in range(args.steps):
            step(prof)
    clock["stack"].append(wall_minus_monotonic())
    clock["plain"] = [wall_minus_monotonic()]
    with torch.profiler.profile(activities=cpu, record_shapes=True) as prof:
        for _ in range(args.steps):
            step(prof)
    clock["plain"].append(wall_minus_monotonic())
    os.makedirs(os.path.join(args.out, "clock"), exist_ok=True)
    with open(os.path.join(args.out, "clock", f"rank{rank}.json"), "w") as f:
        json.dump(clock, f)
    os.makedirs(plain_dir, exist_ok=True)
    prof.export_chrome_trace(os.path.join(plain_dir, f"rank{rank}.pt.trace.json"))
    ddp = model = opt = None  # releases gloo's buffers before teardown
    gc.collect()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
