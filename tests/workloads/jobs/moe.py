"""A mixture-of-experts layer with one expert per rank: tokens are routed by a fixed
router, dispatched to their expert with an uneven ``all_to_all_single`` and combined
back the same way (autograd through both, so backward all-to-alls too); each step
also passes a token-count summary around the ring with ``batch_isend_irecv``.

    torchrun --nproc-per-node 2 moe.py
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
import torch.nn as nn
from _truth import Truth

STEPS = 3
HIDDEN = 16
TOKENS = 12


def main() -> None:
    dist.init_process_group("gloo")
    truth = Truth()
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    router = torch.randn(HIDDEN, world)  # fixed: the same on every rank
    torch.manual_seed(1 + rank)
    expert = nn.Linear(HIDDEN, HIDDEN)  # this rank's expert
    opt = torch.optim.SGD(expert.parameters(), lr=0.05)
    loss = torch.zeros(())
    ring_counts = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 * rank + step)
        x, y = torch.randn(TOKENS, HIDDEN, generator=g), torch.randn(TOKENS, HIDDEN, generator=g)
        dest = (x @ router).argmax(dim=1)
        order = dest.argsort()
        send_counts = torch.bincount(dest, minlength=world)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)  # even: one count per peer
        send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
        routed = x[order]
        received = dnn.all_to_all_single(
            torch.empty(sum(recv_splits), HIDDEN), routed, recv_splits, send_splits
        )
        processed = expert(received)
        back = dnn.all_to_all_single(
            torch.empty(TOKENS, HIDDEN), processed, send_splits, recv_splits
        )
        out = torch.empty_like(back).index_copy(0, order, back)
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        # pass this step's routing summary around the ring
        mine = send_counts.float()
        theirs = torch.empty_like(mine)
        ops = [
            dist.P2POp(dist.isend, mine, (rank + 1) % world),
            dist.P2POp(dist.irecv, theirs, (rank - 1) % world),
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        ring_counts.append(theirs.tolist())
    truth.finish(loss.item(), steps=STEPS, world=world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
