"""What a job records of itself for the tests: its loss and PyTorch's Flight Recorder.

Not part of syncpace and not imported by it: the jobs beside this file are plain
PyTorch, and this is the one thing the tests add to them. With ``WORKLOAD_OUT`` set it
writes ``rank-R.json`` there: the final loss (exact, as ``float.hex``), the Flight
Recorder's entries (``TORCH_FR_BUFFER_SIZE`` must be set; torch records gloo's
collectives, not its point-to-point calls), the entry count at named points of the
job (``mark``), and counts the job derives from its own code.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch.distributed as dist

_KEEP = (
    "record_id",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "is_p2p",
    "profiling_name",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "thread_id",
)


def _entries() -> list[dict[str, Any]]:
    from torch._C._distributed_c10d import _dump_fr_trace_json

    return json.loads(_dump_fr_trace_json(True, False)).get("entries", [])


class Truth:
    def __init__(self) -> None:
        self.out = os.environ.get("WORKLOAD_OUT")
        self.marks: dict[str, int] = {}

    def mark(self, name: str) -> None:
        """Flight Recorder entries so far (to split training from what follows)."""
        if self.out:
            self.marks[name] = len(_entries())

    def finish(self, loss: float, **derived: Any) -> None:
        """Write this rank's record; call before destroy_process_group."""
        print(f"loss {loss!r}", flush=True)
        if not self.out:
            return
        entries = [{k: e.get(k) for k in _KEEP} for e in _entries()]
        record = {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "loss": float(loss).hex(),
            "fr": entries,
            "marks": self.marks,
            "derived": derived,
        }
        path = os.path.join(self.out, f"rank-{dist.get_rank()}.json")
        with open(path, "w") as f:
            json.dump(record, f)
