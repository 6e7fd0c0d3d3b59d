"""Handwritten digits with DistributedDataParallel: a small real training job.

The data set is scikit-learn's ``digits`` (1,797 8×8 images, shipped inside the
scikit-learn wheel: nothing is downloaded). 80 % trains, 20 % is held out. Each rank
takes its shard of the training set every epoch (``DistributedSampler``); the model
is an MLP of ``--layers`` hidden layers of ``--hidden`` units, whose gradients DDP
all-reduces in ``--bucket-cap-mb`` buckets during backward. Rank 0 prints the loss
every ``--log-every`` steps and the held-out accuracy after every epoch.

``--slow-rank R --slow-ms MS`` plants a straggler: rank R spends MS more every step
before its forward pass (a slower host: throttled, shared, or feeding a slower
loader).

    torchrun --nproc-per-node 4 examples/digits_ddp.py --epochs 4
    syncpace run -- torchrun --nproc-per-node 4 examples/digits_ddp.py --slow-rank 2
    syncpace run -- torchrun --nproc-per-node 4 -m syncpace.demo.digits_ddp

It imports nothing from syncpace: tracing attaches from outside. Needs torch and
scikit-learn (``pip install 'syncpace[demo]'``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import gzip
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=4, help="passes over the training set")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: all)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--layers", type=int, default=2, help="hidden layers")
    p.add_argument("--hidden", type=int, default=512, help="units per hidden layer")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--bucket-cap-mb", type=float, default=1.0, help="DDP gradient bucket size")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank that is slower every step")
    p.add_argument("--slow-ms", type=float, default=0.0, help="extra time of the slow rank")
    p.add_argument("--log-every", type=int, default=0, help="rank 0 prints every N steps (0: off)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="bound on any collective")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images as float32 in [0, 1] of shape (1797, 64), labels 0..9)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        sys.exit("digits_ddp: needs scikit-learn for its digits data: pip install scikit-learn")
    # Read the file the wheel ships directly: importing sklearn.datasets costs seconds.
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if path.exists():
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float32)
        x, y = table[:, :-1], table[:, -1]
    else:  # a layout this reader does not know: ask scikit-learn
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = digits.data.astype(np.float32), digits.target
    return x / 16.0, y.astype(np.int64)


def split(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[TensorDataset, TensorDataset]:
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    return (
        TensorDataset(torch.from_numpy(x[train]), torch.from_numpy(y[train])),
        TensorDataset(torch.from_numpy(x[test]), torch.from_numpy(y[test])),
    )


def build_model(layers: int, hidden: int) -> nn.Module:
    blocks: list[nn.Module] = []
    width = 64
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*blocks, nn.Linear(width, 10))


@torch.no_grad()
def accuracy(model: nn.Module, data: TensorDataset) -> float:
    x, y = data.tensors
    return float((model(x).argmax(dim=1) == y).float().mean())


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    train, test = split(*load_digits_arrays(), seed=args.seed)
    torch.manual_seed(args.seed)
    model = build_model(args.layers, args.hidden)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch, sampler=sampler, drop_last=True)
    per_epoch = len(loader)
    total = per_epoch * args.epochs
    if args.max_steps > 0:
        total = min(total, args.max_steps)
    if rank == 0:
        print(
            f"digits_ddp: {world} ranks, {len(train)} training images, {per_epoch} steps "
            f"per epoch, {total} steps",
            flush=True,
        )
    step, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= total:
                break
            if rank == args.slow_rank and args.slow_ms > 0:
                time.sleep(args.slow_ms / 1000)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and args.log_every and step % args.log_every == 0:
                print(f"step {step}/{total} loss {loss.item():.4f}", flush=True)
        if rank == 0:
            print(f"epoch {epoch + 1}: held-out accuracy {accuracy(model, test):.1%}", flush=True)
        if step >= total:
            break
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"digits_ddp: {step} steps in {elapsed:.2f}s ({step / elapsed:.1f} steps/s)")
    # Every rank leaves together (rank 0 hosts the store the others still talk to), and
    # releasing gloo's buffers before teardown avoids an abort at exit.
    dist.barrier()
    del ddp, model, optimizer
    gc.collect()
    dist.destroy_process_group()
    return elapsed


if __name__ == "__main__":
    main()
