"""FSDP2 training with a distributed checkpoint saved after the last step.

Every block is ``fully_shard``-ed, then the root; a few SGD steps; then the model and
optimizer state go to ``torch.distributed.checkpoint`` as a training script would at
the end of an epoch (its collectives come after the last ``optimizer.step()``).

    torchrun --nproc-per-node 2 fsdp2.py CHECKPOINT_DIR
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from _truth import Truth
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard

STEPS = 3
HIDDEN = 32
BLOCKS = 3


def main() -> None:
    dist.init_process_group("gloo")
    truth = Truth()
    torch.manual_seed(0)
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()) for _ in range(BLOCKS)],
        nn.Linear(HIDDEN, 1),
    )
    for block in model[:BLOCKS]:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.zeros(())
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * dist.get_rank() + step)
        x, y = torch.randn(8, HIDDEN, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    truth.mark("trained")
    model_state, optim_state = get_state_dict(model, opt)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=sys.argv[1])
    truth.finish(loss.item(), steps=STEPS, units=BLOCKS + 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
