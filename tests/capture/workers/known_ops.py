"""Issues a known list of collectives through every public API, then exits.

The expected events are computed in tests/trace/test_tracer.py from the same sizes.
"""

import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import syncpace

N = 64  # elements per rank buffer (float32 -> 256 bytes)


def main() -> None:
    syncpace.attach(os.environ["TRACE_DIR"], flush_interval_s=0.2)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(N)
    dist.all_reduce(x)
    dist.all_reduce(x, async_op=True).wait()
    dist.all_gather([torch.zeros(N) for _ in range(world)], x)
    dist.all_gather_into_tensor(torch.zeros(N * world), x)
    dist.reduce_scatter(torch.zeros(N), [torch.ones(N) for _ in range(world)])
    dist.reduce_scatter_tensor(torch.zeros(N), torch.ones(N * world))
    dist.broadcast(x, src=0)
    dist.reduce(x, dst=0)
    dist.gather(x, [torch.zeros(N) for _ in range(world)] if rank == 0 else None, dst=0)
    dist.scatter(
        torch.zeros(N), [torch.ones(N) for _ in range(world)] if rank == 0 else None, src=0
    )
    dist.all_to_all_single(torch.zeros(N * world), torch.ones(N * world))
    dist.all_to_all([torch.zeros(N) for _ in range(world)], [torch.ones(N) for _ in range(world)])
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    dist.broadcast_object_list([{"a": 1}], src=0)
    dist.barrier()
    funcol.all_reduce(torch.ones(N), "sum", dist.group.WORLD).wait()
    # Point to point in a ring: every rank sends N floats right and receives from the left.
    right, left = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(torch.ones(N), right)
        dist.recv(torch.zeros(N), left)
    else:
        dist.recv(torch.zeros(N), left)
        dist.send(torch.ones(N), right)
    ops = [
        dist.P2POp(dist.isend, torch.ones(N), right),
        dist.P2POp(dist.irecv, torch.zeros(N), left),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.all_reduce(x, group=sub)
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    sys.exit(main())
