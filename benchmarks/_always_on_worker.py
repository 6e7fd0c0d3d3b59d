"""One rank of the always-on benchmark (launched by always_on.py): a DDP MLP with one
bucket per layer and a sleep for compute, run for SECONDS; rank 0 prints its step times
as one JSON line."""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

LAYERS, HIDDEN, COMPUTE_S = 16, 64, 0.02


def main() -> None:
    seconds = float(sys.argv[1])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(LAYERS):
        blocks += [nn.Linear(HIDDEN, HIDDEN), nn.Tanh()]
    layer_mb = (HIDDEN * HIDDEN + HIDDEN) * 4 / 2**20
    net = DistributedDataParallel(nn.Sequential(*blocks), bucket_cap_mb=layer_mb * 1.01)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    x = torch.randn(8, HIDDEN)
    # Every rank stops at the same step: rank 0 decides from its clock, all follow.
    stop = torch.zeros(1)
    end = time.monotonic() + seconds
    times = []
    while True:
        t0 = time.perf_counter()
        time.sleep(COMPUTE_S)
        opt.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        if len(times) % 50 == 0:
            stop[0] = float(time.monotonic() >= end) if dist.get_rank() == 0 else 0.0
            dist.broadcast(stop, 0)
            if stop[0]:
                break
    if dist.get_rank() == 0:
        print(json.dumps(times), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
