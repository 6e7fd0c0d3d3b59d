"""Hand-built traces of all-reduces on one host, every number known: the writer the
small-call tests share."""

from __future__ import annotations

from pathlib import Path

from syncpace.trace.writer import RankTraceWriter

MS = 1_000_000


def write_one_host(
    root: Path, events: dict[int, list[tuple]], steps: dict[int, list[tuple]]
) -> Path:
    """Each rank's all-reduces of the default group, rows (step, seq, bytes, enter,
    wait (negative: none recorded), exit, timing), and its steps, rows (step, start,
    end); times in ms. The ranks of ``events`` are the job's, on one host (gloo)."""
    world = len(events)
    for rank in sorted(events):
        meta = {
            "world_size": world,
            "host": "node0",
            "local_rank": rank,
            "clock": {"offset_ns": 0, "uncertainty_ns": 0},
            "groups": {"0": {"ranks": list(range(world)), "backend": "gloo"}},
            "source": "synthetic",
        }
        w = RankTraceWriter(root, rank, meta, flush_interval_s=3600, offset_ns=lambda: 0)
        for step, seq, nbytes, enter, wait, exit_, timing in events[rank]:
            row = (rank, step, "0", world, seq, "all_reduce", nbytes, "float32", -1)
            waited = int(wait * MS) if wait >= 0 else -1
            w.add_event((*row, int(enter * MS), int(exit_ * MS), timing, "completed", None, waited))
        for step, start, end in steps.get(rank, []):
            w.add_step((rank, step, int(start * MS), int(end * MS), 0))
        w.close()
    return root
