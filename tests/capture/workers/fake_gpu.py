"""Ranks on fake GPUs (tests/fakedevice.py): NCCL's host semantics over a gloo group,
traced through the tracer's own path, device times included.

Usage: fake_gpu.py MODE WHO STEPS
  slow_gpu  rank WHO's kernels take 5 times as long: its CPU still runs ahead, its
            device reaches every collective last; meanwhile the next rank's host is
            the last to enqueue (5 ms of host work a step), far ahead of its device
  late_cpu  rank WHO's host works 150 ms before it enqueues each step: its device
            waits for it
  even      every rank alike
Compute is 20 ms of kernels per step on every other rank.
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fake device

from fakedevice import FakeDevice, FakeNccl  # noqa: E402
from syncpace.capture.config import TraceConfig  # noqa: E402
from syncpace.capture.device import use_device  # noqa: E402
from syncpace.capture.process_group import TracingProcessGroup  # noqa: E402
from syncpace.capture.tracer import Tracer  # noqa: E402

MS = 1_000_000


def main() -> None:
    mode, who, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")  # untraced: the fake communicator runs on it
    rank, world = dist.get_rank(), dist.get_world_size()
    tracer = Tracer(TraceConfig(dir=os.environ["TRACE_DIR"], flush_interval_s=0.1, clock_rounds=8))
    # each device's clock its own: the trace must place them all on rank 0's
    device = FakeDevice(host_now=tracer.now, offset_ns=(rank + 1) * 3_000_000_000)
    use_device(device)
    tracer.on_default_group(rank, world, dist.distributed_c10d._get_default_store(), "nccl")
    comm = FakeNccl(device, dist.group.WORLD)
    group = TracingProcessGroup(comm, tracer, backend_name="nccl", global_ranks=list(range(world)))
    group._set_group_name("0")
    compute = 100 * MS if (mode == "slow_gpu" and rank == who) else 20 * MS
    x = torch.ones(1024)
    for _ in range(steps):
        if mode == "late_cpu" and rank == who:
            time.sleep(0.15)  # data loading, Python: the host is late to enqueue
        if mode == "slow_gpu" and rank == (who + 1) % world:
            time.sleep(0.005)  # late to enqueue, yet its device waits on the slow one
        device.launch(compute)
        group.allreduce([x]).wait()
        tracer.on_step(manual=True)
    device.synchronize()
    tracer.close()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
