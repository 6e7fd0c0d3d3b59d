"""Pipeline parallel training with torch.distributed.pipelining, two stages.

Each rank holds one stage of a 4-layer MLP; activations go forward and gradients
back over send/recv (two-way point-to-point). SCHEDULE is ``gpipe`` or ``1f1b``.

    torchrun --nproc-per-node 2 pipeline.py gpipe
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from _truth import Truth
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

STEPS = 3
HIDDEN = 16
MICROBATCHES = 4
BATCH = 8


def main() -> None:
    schedule_name = sys.argv[1]
    dist.init_process_group("gloo")
    truth = Truth()
    rank, stages = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    full = nn.Sequential(*[nn.Linear(HIDDEN, HIDDEN) for _ in range(2 * stages)])
    part = full[2 * rank : 2 * rank + 2]
    stage = PipelineStage(
        part,
        rank,
        stages,
        torch.device("cpu"),
    )
    schedule_cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
    schedule = schedule_cls(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(part.parameters(), lr=0.05)
    loss = 0.0
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(BATCH, HIDDEN, generator=g), torch.randn(BATCH, HIDDEN, generator=g)
        if rank == 0:
            schedule.step(x)
        elif rank == stages - 1:
            losses: list[torch.Tensor] = []
            schedule.step(target=y, losses=losses)
            loss = float(torch.stack(losses).mean().detach())
        opt.step()
        opt.zero_grad()
    # the loss lives on the last stage; every rank reports it
    shared = torch.tensor([loss])
    dist.broadcast(shared, src=stages - 1)
    truth.finish(float(shared), steps=STEPS, microbatches=MICROBATCHES, stages=stages)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
