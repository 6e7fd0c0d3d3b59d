"""Groups the tracer cannot wrap run untraced, with one warning each cause.

2 gloo ranks, traced (``python fail_open.py OUT``). Rank 1 cannot even prepare its
default group's backends (a forced error), so torch's own path builds it, untraced,
and it must still meet rank 0's traced group in every collective. Then both ranks
fail to wrap two new groups (the wrapper's constructor raises), which run untraced,
and a third, made once the fault is gone, is traced again. Last, a split whose
wrapping fails is the plain split. Prints ``RESULTS {...}``.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

import syncpace
from syncpace.capture import process_group, torch_hooks


def reduced(group=None):
    t = torch.ones(2) * (dist.get_rank() + 1)
    dist.all_reduce(t, group=group)
    return t.tolist()


def fail(*args, **kwargs):
    raise RuntimeError("forced failure")


def main() -> None:
    rank = int(os.environ["RANK"])
    syncpace.attach(sys.argv[1], flush_interval_s=0.2, clock_timeout_s=2.0)
    prepare = torch_hooks._prepare
    if rank == 1:
        torch_hooks._prepare = fail
    # CPU only: torch's C++ split splits a backend once per device it serves, on one
    # store, and two gloo rendezvous there can cross (plain "gloo" serves cpu and cuda).
    dist.init_process_group("cpu:gloo")
    torch_hooks._prepare = prepare
    pg = c10d._get_default_group()
    results: dict[str, object] = {"default": [type(pg).__name__, reduced()]}
    init = process_group.TracingProcessGroup.__init__
    process_group.TracingProcessGroup.__init__ = fail
    broken = [dist.new_group([0, 1]), dist.new_group([0, 1])]
    process_group.TracingProcessGroup.__init__ = init
    results["unwrapped"] = [[type(g).__name__, g.group_name, reduced(g)] for g in broken]
    healthy = dist.new_group([0, 1])
    results["rewrapped"] = [type(healthy).__name__, healthy.group_name, reduced(healthy)]
    wrap = process_group.wrap_group
    process_group.wrap_group = fail
    split = pg.split_group([0, 1], group_name="split-unwrapped")
    process_group.wrap_group = wrap
    results["split"] = [type(split).__name__, split.size(), split.group_name]
    split_work = torch.ones(2)
    split.allreduce([split_work]).wait()
    results["split"].append(split_work.tolist())
    results["default_again"] = reduced()
    dist.destroy_process_group()
    print("RESULTS " + json.dumps({"rank": rank, "results": results}), flush=True)
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    sys.exit(main())
