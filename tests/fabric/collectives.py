"""A 4-rank gloo job for the fabric tests: intra-leaf vs cross-leaf all-reduces.

Run one process per host (``syncpace fabric run -- python collectives.py OUT``) on a
2-leaf x 2-host fabric. Hosts h0,h1 share leaf0 and h2,h3 leaf1. Each phase runs
two all-reduces at once: intra-leaf ({0,1} and {2,3}, leaf-local links only) and
cross-leaf ({0,2} and {1,3}, both through the uplinks). Rank 0 writes every
rank's timings to OUT as JSON; the trace, when the tracer is armed, records the same.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

ELEMENTS = int(os.environ.get("COLLECTIVES_ELEMENTS", 256 * 1024))  # 1 MiB of float32
REPEATS = int(os.environ.get("COLLECTIVES_REPEATS", 5))


def timed_all_reduce(group: dist.ProcessGroup, tensor: torch.Tensor) -> float:
    dist.barrier()  # both pairs start together, so the cross-leaf pairs share the uplinks
    start = time.perf_counter()
    dist.all_reduce(tensor, group=group)
    return time.perf_counter() - start


def main() -> int:
    out = sys.argv[1]
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
    rank = dist.get_rank()
    assert dist.get_world_size() == 4, "run on a 2-leaf x 2-host fabric"
    intra = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    cross = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    tensor = torch.ones(ELEMENTS)
    timed_all_reduce(intra, tensor)  # warm up the connections of both groups
    timed_all_reduce(cross, tensor)
    times = {"intra": [], "cross": []}
    for _ in range(REPEATS):
        times["intra"].append(timed_all_reduce(intra, tensor))
        times["cross"].append(timed_all_reduce(cross, tensor))
    gathered: list[dict] = [{} for _ in range(4)]
    dist.all_gather_object(gathered, {"rank": rank, "host": os.uname().nodename, **times})
    if rank == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
