"""2D parallelism on a (dp=2, tp=2) DeviceMesh: tensor parallel inside each dp
replica, FSDP2 across replicas; a metric all-reduced on ``new_subgroups`` groups.

    torchrun --nproc-per-node 4 mesh_2d.py
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from _truth import Truth
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

STEPS = 3
HIDDEN = 16


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def main() -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    truth = Truth()
    # pairs of neighbouring ranks, for a per-pair metric (not part of the mesh)
    pair, _all_pairs = dist.new_subgroups(group_size=2)
    torch.manual_seed(0)
    model = parallelize_module(
        MLP(), mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()}
    )
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.zeros(())
    metric = torch.zeros(1)
    for step in range(STEPS):
        dp = mesh["dp"].get_local_rank()
        g = torch.Generator().manual_seed(100 * dp + step)  # one batch per dp replica
        x, y = torch.randn(8, HIDDEN, generator=g), torch.randn(8, HIDDEN, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        metric.fill_(loss.item())
        dist.all_reduce(metric, group=pair)
    truth.finish(loss.item(), steps=STEPS, pair_group=pair.group_name)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
