"""torch.compile with DDP, both ways the documentation shows.

compile_ddp   torch.compile(DDP(model)): Dynamo traces DDP itself (DDPOptimizer)
ddp_compile   DDP(torch.compile(model)): DDP around a compiled module

  torchrun --nproc-per-node 2 compiled.py compile_ddp
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from _truth import Truth
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
HIDDEN = 16


def main() -> None:
    pattern = sys.argv[1]
    backend = sys.argv[2] if len(sys.argv) > 2 else "aot_eager"
    dist.init_process_group("gloo")
    truth = Truth()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
    if pattern == "compile_ddp":
        net = torch.compile(DDP(model), backend=backend)
    elif pattern == "ddp_compile":
        net = DDP(torch.compile(model, backend=backend))
    else:
        raise SystemExit(f"unknown pattern {pattern}")
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.zeros(())
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * dist.get_rank() + step)
        x, y = torch.randn(8, HIDDEN, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    truth.finish(loss.item(), steps=STEPS)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
