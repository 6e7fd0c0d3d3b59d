"""A small real DistributedDataParallel training job with many gradient buckets.

Runs anywhere torchrun does: gloo on CPU, NCCL when every rank has a GPU. The model
is an MLP of ``--layers`` square layers; small buckets (``--bucket-cap-mb``) make DDP
issue many all-reduces per step, which is what tracing and benchmarking need.
``--compute-ms`` adds a sleep per step to stand for compute that a CPU-only box
cannot provide; ``--slow-rank``/``--slow-ms`` plant a straggler.

    torchrun --nproc-per-node 4 examples/ddp_train.py --steps 20
    syncpace run -- torchrun --nproc-per-node 4 examples/ddp_train.py
    syncpace run -- torchrun --nproc-per-node 4 -m syncpace.demo.ddp_train

It imports nothing from syncpace: tracing attaches from outside.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=20, help="training iterations")
    p.add_argument("--layers", type=int, default=24, help="square linear layers in the model")
    p.add_argument("--hidden", type=int, default=128, help="width of every layer")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--bucket-cap-mb", type=float, default=0.05, help="DDP gradient bucket size")
    p.add_argument("--compute-ms", type=float, default=0.0, help="extra sleep per step (compute)")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank that sleeps --slow-ms more")
    p.add_argument("--slow-ms", type=float, default=0.0, help="extra sleep of the slow rank")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_model(layers: int, hidden: int) -> nn.Module:
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*blocks, nn.Linear(hidden, 1))


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    model = build_model(args.layers, args.hidden).to(device)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(args.seed + rank)
    start = time.perf_counter()
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.hidden, generator=generator).to(device)
        y = torch.randn(args.batch, 1, generator=generator).to(device)
        delay = args.compute_ms + (args.slow_ms if rank == args.slow_rank else 0.0)
        if delay > 0:
            time.sleep(delay / 1000)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(
            f"ddp_train: {args.steps} steps in {elapsed:.2f}s ({args.steps / elapsed:.1f} steps/s)"
        )
    # Releasing gloo's buffers before teardown avoids a rare abort at exit.
    del ddp, model, optimizer
    gc.collect()
    dist.destroy_process_group()
    return elapsed


if __name__ == "__main__":
    main()
