"""One rank of the tracer-overhead benchmark (launched by tracer_overhead.py).

mode ``micro``: tiny all-reduces in blocks, traced and untraced interleaved (see micro()).
mode ``ddp``: a DDP MLP with one bucket per layer; prints seconds per step.
Output: one JSON line on stdout from rank 0.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def micro(blocks: int, per_block: int) -> dict[str, list[float]]:
    """µs per tiny all-reduce, traced and untraced, in interleaved blocks of one process.

    Under the tracer the default group wraps a plain process group (``_inner``) that
    holds the very same gloo backend: calling the functional API on both isolates
    exactly what tracing adds, with the process, backend and machine state shared."""
    traced = dist.group.WORLD
    untraced = getattr(traced, "_inner", None)
    groups = {"traced": traced} if untraced is None else {"traced": traced, "untraced": untraced}
    x = torch.ones(16)
    for group in groups.values():
        for _ in range(300):
            dist.all_reduce(x, group=group)
    out: dict[str, list[float]] = {name: [] for name in groups}
    for _ in range(blocks):
        for name, group in groups.items():
            t0 = time.perf_counter_ns()
            for _ in range(per_block):
                dist.all_reduce(x, group=group)
            out[name].append((time.perf_counter_ns() - t0) / per_block / 1000)
    return out


def ddp(steps: int, layers: int, hidden: int) -> list[float]:
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(hidden, hidden), nn.Tanh()]
    model = nn.Sequential(*blocks)
    layer_mb = (hidden * hidden + hidden) * 4 / 2**20
    net = DistributedDataParallel(model, bucket_cap_mb=layer_mb * 1.01)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    x = torch.randn(8, hidden)
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
        opt.step()
        if i >= 3:  # the first steps rebuild buckets
            times.append(time.perf_counter() - t0)
    del net, opt
    gc.collect()
    return times


def main() -> None:
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    if mode == "micro":
        result = micro(int(sys.argv[2]), int(sys.argv[3]))
    else:
        result = ddp(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    if dist.get_rank() == 0:
        print(json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
