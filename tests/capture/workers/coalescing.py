"""batch_isend_irecv on a traced group, with and without a backend that coalesces.

gloo does not coalesce, so the coalescing backend is a stand-in: torch's
FakeProcessGroup (which implements start/end coalescing and returns finished works)
registered for the ``meta`` device on the traced default group, and the capability
flag NCCL reports (``supports_coalescing``) answered true for it. Prints one JSON
line: which coalescing calls the traced group saw, in each mode, and the trace.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import FakeProcessGroup, ProcessGroup

import syncpace
from syncpace.capture import torch_hooks
from syncpace.trace import load_trace


def batch(device: str) -> list:
    t = torch.ones(4, device=device)
    r = torch.empty(4, device=device)
    ops = [dist.P2POp(dist.isend, t, 0), dist.P2POp(dist.irecv, r, 0)]
    return dist.batch_isend_irecv(ops)


def main() -> None:
    out = sys.argv[1]
    syncpace.attach(out)
    dist.init_process_group("gloo")
    pg = dist.distributed_c10d._get_default_group()
    fake = FakeProcessGroup._create_internal(0, 1)
    for target in (pg, pg._inner):
        target._register_backend(torch.device("meta"), ProcessGroup.BackendType.CUSTOM, fake)
    seen: list[str] = []
    start, end = pg._start_coalescing, pg._end_coalescing

    def spy_start(device):
        seen.append("start")
        return start(device)

    def spy_end(device):
        seen.append("end")
        return end(device)

    pg._start_coalescing, pg._end_coalescing = spy_start, spy_end
    report = {}
    # 1. the backend does not coalesce (gloo's answer): torch's one-by-one path
    works = batch("meta")
    for w in works:
        w.wait()
    report["plain"] = {"calls": list(seen), "works": len(works)}
    seen.clear()
    # 2. the backend coalesces (NCCL's answer): the batch goes through start/end
    torch_hooks._supports_coalescing = lambda group, device: True
    works = batch("meta")
    for w in works:
        w.wait()
    report["coalesced"] = {"calls": list(seen), "works": len(works)}
    dist.destroy_process_group()
    events = load_trace(out).events.sort("enter_ns")
    report["events"] = events.select("op", "peer", "seq", "timing", "status").rows()
    print(json.dumps(report))
    os._exit(0)


if __name__ == "__main__":
    main()
