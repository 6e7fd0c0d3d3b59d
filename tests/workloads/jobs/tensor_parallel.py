"""Tensor parallel MLP on a 1D DeviceMesh: column-wise then row-wise linear layers.

torchrun --nproc-per-node 2 tensor_parallel.py
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from _truth import Truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

STEPS = 3
HIDDEN = 32


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def main() -> None:
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    truth = Truth()
    torch.manual_seed(0)
    model = parallelize_module(MLP(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.zeros(())
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)  # the same batch on every TP rank
        x, y = torch.randn(8, HIDDEN, generator=g), torch.randn(8, HIDDEN, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    truth.finish(loss.item(), steps=STEPS)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
