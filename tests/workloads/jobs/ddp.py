"""Data parallel training as the DDP tutorial writes it, in three variants.

buckets     a 4-layer MLP, bucket_cap_mb small enough for several buckets per step
one_bucket  the same model with DDP's defaults: its gradients fit one bucket; a
            second thread all-reduces a metric on a group of its own meanwhile
no_sync     gradient accumulation over 2 micro-batches with no_sync(), the whole
            job under torch.profiler
straggler   STEPS=10 steps where the last rank's data loading takes 40 ms longer
            (a slow disk on one node), for the multi-node tests

  torchrun --nproc-per-node 2 ddp.py buckets
"""

import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from _truth import Truth
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 4
HIDDEN = 32


def model() -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(HIDDEN, HIDDEN), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(HIDDEN, 1))


def batch(step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + 10 * step + micro)
    return torch.randn(8, HIDDEN, generator=g), torch.randn(8, 1, generator=g)


def train(ddp: nn.Module, accumulate: int, steps: int = STEPS, slow_s: float = 0.0) -> float:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss = torch.zeros(())
    for step in range(steps):
        time.sleep(slow_s)  # data loading
        for micro in range(accumulate):
            x, y = batch(step, micro)
            if micro < accumulate - 1:
                with ddp.no_sync():  # gradients accumulate locally, no all-reduce
                    nn.functional.mse_loss(ddp(x), y).backward()
            else:
                loss = nn.functional.mse_loss(ddp(x), y)
                loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item()


def metrics_thread(group: dist.ProcessGroup, rounds: int, done: list) -> None:
    value = torch.zeros(4)
    for i in range(rounds):
        value.fill_(float(i))
        dist.all_reduce(value, group=group)
    done.append(float(value[0]))


def main() -> None:
    variant = sys.argv[1]
    dist.init_process_group("gloo")
    truth = Truth()
    if variant == "buckets":
        ddp = DDP(model(), bucket_cap_mb=0.004)  # ~1000 floats a bucket
        loss = train(ddp, 1)
        derived = {"steps": STEPS}
    elif variant == "one_bucket":
        side = dist.new_group(list(range(dist.get_world_size())))
        ddp = DDP(model())
        rounds, done = 25, []
        thread = threading.Thread(target=metrics_thread, args=(side, rounds, done))
        thread.start()
        loss = train(ddp, 1)
        thread.join()
        derived = {"steps": STEPS, "side_all_reduces": rounds, "side_group": side.group_name}
    elif variant == "no_sync":
        from torch.profiler import ProfilerActivity, profile

        ddp = DDP(model())
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = train(ddp, 2)
        # the profiler's own account of the collectives it saw on this rank
        ops = {e.key: e.count for e in prof.key_averages() if e.key.startswith("gloo:")}
        derived = {"steps": STEPS, "profiler_ops": ops}
    elif variant == "straggler":
        slow = 0.04 if dist.get_rank() == dist.get_world_size() - 1 else 0.0
        loss = train(DDP(model()), 1, steps=10, slow_s=slow)
        derived = {"steps": 10, "straggler": dist.get_world_size() - 1}
    else:
        raise SystemExit(f"unknown variant {variant}")
    truth.finish(loss, **derived)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
