"""A plain PyTorch training job with one planted cause (or none), for the scenario suite.

It imports nothing from syncpace: the tracer attaches from outside (``syncpace run``,
or the fabric's launcher with the traced environment). Compute is mostly sleep, so
the planted cause, not the CPUs of a small test machine, sets the timing; ``--burn-ms``
adds real CPU work (what a CPU cap on a host slows down).

Communication, ``--comm``:

* ``ddp``   DistributedDataParallel over a small MLP; backward's compute (``--bwd-ms``)
  runs in sleeping autograd nodes between the layers (``--overlap good``: buckets are
  reduced while backward goes on) or all before the first gradient (``poor``: every
  bucket is issued at the end of backward);
* ``sync``  ``--buckets`` blocking all-reduces of ``--bucket-bytes`` after the compute;
* ``async`` the same all-reduces issued with ``async_op=True`` during backward's compute
  (``--overlap poor``: all after it) and waited on at its end (late waits: the trace
  only bounds their completions);
* ``--small K`` adds K blocking all-reduces of ``--small-bytes`` per step (loss and
  metric syncs, unbucketed); ``--small-fused K`` the same K tensors' worth in one
  blocking all-reduce (those syncs coalesced: the fix a small-calls plant's rerun runs).

Plants: ``--slow-ranks 1,3 --slow-ms 10`` (persistent compute straggler), ``--jitter
lognormal:0.3`` or ``pareto:SHAPE[:SCALE]`` (per rank and step, seeded; extra compute
as a share of ``--compute-ms``: SCALE x a Lomax draw of that shape, 0.1 by default),
``--stall-step 20 --stall-rank 1 --stall-ms 3000`` (one-off). ``--ready-dir DIR``
(with ``--phases``): each phase's steps wait for ``DIR/phase-K``, which the fabric
harness makes once that phase's faults and flows are in force. ``--cap-ranks 1
--cap-cgroup DIR``: those ranks move themselves into the cgroup DIR (its CPU limit set
by the caller: a rank starved of CPU on its own). ``--compute-log DIR``: each rank writes
``DIR/rank-R.json``, the wall milliseconds of its forward-side compute (sleep and burn) in
every step, as the job's own clock saw them: the truth a test holds an analysis's
compute figures against on a loaded machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


class Sleep(torch.autograd.Function):
    """Identity forward; backward sleeps (compute the CPU does not do)."""

    @staticmethod
    def forward(ctx, x, seconds):  # type: ignore[override]
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if ctx.seconds > 0:
            time.sleep(ctx.seconds)
        return grad, None


class Net(nn.Module):
    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.naps: list[float] = [0.0] * (layers + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, nap in zip(self.layers, self.naps, strict=False):
            x = Sleep.apply(x, nap)
            x = torch.relu(layer(x))
        return Sleep.apply(x, self.naps[-1])


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1


def wait_for(path: pathlib.Path, timeout_s: float) -> None:
    """Until ``path`` exists, at most ``timeout_s``: the harness makes it once a phase's
    fabric plants are in force; past the bound the phase runs as it is."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--compute-ms", type=float, default=30.0, help="forward-side sleep")
    p.add_argument("--bwd-ms", type=float, default=0.0, help="backward compute (sleep)")
    p.add_argument("--burn-ms", type=float, default=0.0, help="CPU work per step")
    p.add_argument("--comm", choices=("ddp", "sync", "async"), default="sync")
    p.add_argument("--overlap", choices=("good", "poor"), default="good")
    p.add_argument("--buckets", type=int, default=2)
    p.add_argument("--bucket-bytes", type=int, default=256 * 1024)
    p.add_argument("--small", type=int, default=0)
    p.add_argument("--small-bytes", type=int, default=64)
    p.add_argument("--small-fused", type=int, default=0)
    p.add_argument("--slow-ranks", default="")
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--jitter", default="")
    p.add_argument("--stall-step", type=int, default=-1)
    p.add_argument("--stall-rank", type=int, default=0)
    p.add_argument("--stall-ms", type=float, default=0.0)
    p.add_argument("--pause-every", type=int, default=0)
    p.add_argument("--pause-rank", type=int, default=-1)
    p.add_argument("--pause-ms", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cap-ranks", default="")
    p.add_argument("--cap-cgroup", default="")
    p.add_argument("--compute-log", default="", help="directory for each rank's compute times")
    p.add_argument(
        "--ready-dir",
        default="",
        help="with --phases: before each phase's steps rank 0 waits (60 s at most) for "
        "READY_DIR/phase-K, made once that phase's fabric plants are in force",
    )
    p.add_argument(
        "--phases",
        default="",
        help='JSON list of phases run one after another, each {"steps": N, ...} with the '
        "plants of that phase (slow_ranks, slow_ms, jitter, stall_step (within the phase), "
        "stall_rank, stall_ms, pause_every, pause_rank (-1: every rank), pause_ms, small, "
        "overlap, bucket_bytes up to the job's); the trace is "
        "cut into them afterwards",
    )
    return p.parse_args(argv)


def jitter_draw(spec: str, rng: np.random.Generator) -> float:
    """Extra compute as a share of the step's compute (0 when no jitter is planted)."""
    if not spec:
        return 0.0
    kind, _, value = spec.partition(":")
    if kind == "lognormal":
        return float(np.exp(float(value) * rng.standard_normal()) - 1.0)
    if kind == "pareto":  # heavy tail: mostly small, now and then several times the step
        shape, _, scale = value.partition(":")
        return float(rng.pareto(float(shape)) * float(scale or 0.1))
    raise SystemExit(f"unknown jitter {spec!r}")


class Model:
    """What a step trains: DDP over the MLP, or plain gradients all-reduced by hand."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.ddp = None
        self.grads: list[torch.Tensor] = []
        if args.comm == "ddp":
            # one square layer per bucket (weights of --bucket-bytes): little CPU work, so
            # the sleeps and the plants set the timing, not the test machine's cores
            width = max(8, int((args.bucket_bytes / 4) ** 0.5))
            net = Net(max(1, args.buckets), width)
            cap_mb = (width * width + width) * 4 / 2**20
            self.ddp = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=cap_mb)
            self.optimizer = torch.optim.SGD(self.ddp.parameters(), lr=1e-4)
        else:
            self.param = nn.Parameter(torch.zeros(1))
            self.optimizer = torch.optim.SGD([self.param], lr=0.0)
            elements = max(1, args.bucket_bytes // 4)
            self.grads = [torch.ones(elements) for _ in range(args.buckets)]
        self.small = torch.ones(max(1, args.small_bytes // 4))


def backward_begins(model: Model) -> None:
    """The hand-reduced modes' backward compute is a sleep: it begins with a backward
    pass, as a real job's does (``loss.backward()``, then its gradients reduced)."""
    (model.param * 0.0).sum().backward()


def planted_ms(args: argparse.Namespace, rank: int, rng, step: int) -> float:  # noqa: ANN001
    """The compute ``args`` plants on ``rank`` in ``step`` beyond the job's own: its
    jitter draw, a straggler's extra, a one-off stall, a pause every few steps (a
    checkpoint or log flush: one rank's, or every rank's with ``pause_rank`` -1)."""
    slow = {int(r) for r in str(args.slow_ranks).split(",") if r.strip()}
    extra = args.compute_ms * jitter_draw(args.jitter, rng)
    if rank in slow:
        extra += args.slow_ms
    if step == args.stall_step and rank == args.stall_rank:
        extra += args.stall_ms
    every = args.pause_every
    if every and (step + 1) % every == 0 and args.pause_rank in (-1, rank):
        extra += args.pause_ms
    return extra


def one_step(args: argparse.Namespace, model: Model, rank: int, rng, step: int) -> float:  # noqa: ANN001
    """One training step with the plants of ``args`` (``step`` counts within a phase).
    Returns the wall milliseconds its forward-side compute took."""
    extra = planted_ms(args, rank, rng, step)
    began = time.perf_counter()
    time.sleep(max(0.0, args.compute_ms + extra) / 1e3)
    if args.burn_ms:
        burn(args.burn_ms / 1e3)
    compute_ms = (time.perf_counter() - began) * 1e3
    bwd = args.bwd_ms / 1e3
    if model.ddp is not None:
        net = model.ddp.module
        n = len(net.naps)
        # backward runs the naps after the layers (the first one's input needs no
        # gradient): the same compute either way, spread between the buckets or before
        good = [0.0] + [bwd / (n - 1)] * (n - 1)
        net.naps = good if args.overlap == "good" else [0.0] * (n - 1) + [bwd]
        model.optimizer.zero_grad(set_to_none=True)
        out = model.ddp(torch.ones(4, net.layers[0].in_features))
        out.sum().backward()
    elif args.comm == "async":
        backward_begins(model)
        works = []
        if args.overlap == "poor":  # every bucket issued once backward is done
            time.sleep(bwd)
        for g in model.grads:
            if args.overlap == "good":
                time.sleep(bwd / len(model.grads))
            works.append(dist.all_reduce(g[: args.bucket_bytes // 4], async_op=True))
        for w in works:
            w.wait()
    else:
        backward_begins(model)
        time.sleep(bwd)
        for g in model.grads:
            dist.all_reduce(g[: args.bucket_bytes // 4])
    for _ in range(int(args.small)):
        dist.all_reduce(model.small)
    if int(args.small_fused):
        dist.all_reduce(model.small.repeat(int(args.small_fused)))
    if model.ddp is None:
        model.param.grad = torch.zeros(1)
    model.optimizer.step()  # the step boundary the tracer records
    return compute_ms


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank in {int(r) for r in str(args.cap_ranks).split(",") if r.strip()}:
        (pathlib.Path(args.cap_cgroup) / "cgroup.procs").write_text(str(os.getpid()))
    rng = np.random.default_rng([args.seed, rank])
    model = Model(args)
    plan = [(args.steps, args)]
    if args.phases:
        phases = json.loads(args.phases)
        plan = [(int(ph["steps"]), argparse.Namespace(**{**vars(args), **ph})) for ph in phases]
    dist.barrier()
    if rank == 0:
        total = sum(n for n, _ in plan)
        print(f"scenario job: started, {world} ranks, {total} steps", flush=True)
    done = 0
    computes: list[float] = []
    for index, (steps, phase) in enumerate(plan):
        if rank == 0 and args.phases:
            print(f"scenario job: phase {index}", flush=True)
        if args.phases and args.ready_dir:
            if rank == 0:
                wait_for(pathlib.Path(args.ready_dir) / f"phase-{index}", 60.0)
            dist.barrier()
        for k in range(steps):
            computes.append(one_step(phase, model, rank, rng, k))
            done += 1
    if args.compute_log:
        log = pathlib.Path(args.compute_log)
        log.mkdir(parents=True, exist_ok=True)
        (log / f"rank-{rank}.json").write_text(json.dumps(computes))
    if rank == 0:
        print(f"scenario job: {done} steps done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
