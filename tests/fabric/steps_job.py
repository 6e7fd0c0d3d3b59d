"""A training-like gloo job for the fabric tests: one 1 MiB all-reduce per step.

``python steps_job.py OUT STEPS BASELINE [BYTES]``: BYTES the all-reduce's size (1 MiB
when not given); after BASELINE steps rank 0 creates
OUT/baseline-done (a test may then start background traffic) and, where
``STEPS_JOB_GATE_S`` is set, waits up to that many seconds for OUT/traffic-on (the
test's word that its traffic is on) before the next step; rank 0 writes the
per-step times to OUT/steps.json at the end, and when each step began and ended
(wall clock, ns) to OUT/step-spans.json. One rank per host.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist

import syncpace


def main() -> int:
    out, steps, baseline = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    nbytes = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 20
    tensor = torch.ones(nbytes // 4)  # 1 MiB: at the latency knee, so bandwidth-bound
    times, spans = [], []
    for step in range(steps):
        start, wall = time.perf_counter(), time.time_ns()
        dist.all_reduce(tensor)
        syncpace.step()
        times.append(time.perf_counter() - start)
        spans.append((wall, time.time_ns()))
        if rank == 0 and step + 1 == baseline:
            (out / "baseline-done").touch()
            gate = time.monotonic() + float(os.environ.get("STEPS_JOB_GATE_S", "0"))
            while not (out / "traffic-on").exists() and time.monotonic() < gate:
                time.sleep(0.01)
    if rank == 0:
        (out / "steps.json").write_text(json.dumps(times))
        (out / "step-spans.json").write_text(json.dumps(spans))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
