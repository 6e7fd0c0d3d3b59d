"""A small trace written with the real writer, every duration chosen by hand, so tests
can check figures against arithmetic done outside the code under test.

Three ranks on one host, ``STEPS`` iterations of ``STEP_MS`` each, every rank's clock
the same. In step k, from its start S:

* every rank broadcasts ``BCAST_BYTES`` at S + 2 ms; it completes at S + 2.5 ms;
* rank r computes until S + ``COMPUTE_MS[r]`` and enters an all-reduce of
  ``ALLREDUCE_BYTES``; the last rank arrives at S + 15 ms, and the call completes
  ``TRANSFER_MS[k]`` later on every rank;
* the step ends at S + ``STEP_MS`` on every rank.

So, per rank and step: the wait for the last rank is 15 - COMPUTE_MS[r] ms, the exposed
communication TRANSFER_MS[k] ms, the rest compute.
"""

from __future__ import annotations

from pathlib import Path

from syncpace import __version__
from syncpace.trace.writer import RankTraceWriter

WORLD = 3
STEPS = 5
STEP_MS = 20.0
COMPUTE_MS = (10.0, 12.0, 15.0)
LAST_ARRIVAL_MS = 15.0
TRANSFER_MS = (2.0, 2.0, 3.0, 2.5, 5.0)
BCAST_AT_MS, BCAST_MS = 2.0, 0.5
ALLREDUCE_BYTES = 8 << 20
BCAST_BYTES = 4 << 10
T0 = 1_000_000_000
HOST = "hostA"
MS = 1_000_000


def step_start_ns(step: int) -> int:
    return T0 + int(step * STEP_MS * MS)


def _meta(rank: int) -> dict:
    return {
        "tool_version": __version__,
        "world_size": WORLD,
        "host": HOST,
        "node_rank": 0,
        "local_rank": rank,
        "local_world_size": WORLD,
        "pid": 0,
        "device": "cpu",
        "backend": "gloo",
        "clock": {"offset_ns": 0, "uncertainty_ns": 0 if rank == 0 else 1_000, "samples": []},
        "groups": {"0": {"ranks": list(range(WORLD)), "backend": "gloo"}},
        "config": {},
        "started_ns": T0,
        "source": "synthetic",
    }


def _call(rank: int, step: int, seq: int, op: str, nbytes: int, enter: int, exit_: int) -> tuple:
    return (rank, step, "0", WORLD, seq, op, nbytes, "float32", -1, enter, exit_, "simulated",
            "completed", None, -1)  # fmt: skip


def write(out: str | Path) -> Path:
    """Write the run into ``out``; returns it."""
    out = Path(out)
    for rank in range(WORLD):
        writer = RankTraceWriter(out, rank, _meta(rank), flush_interval_s=3600.0)
        for step in range(STEPS):
            s = step_start_ns(step)
            bcast = s + int(BCAST_AT_MS * MS)
            writer.add_event(
                _call(
                    rank,
                    step,
                    2 * step,
                    "broadcast",
                    BCAST_BYTES,
                    bcast,
                    bcast + int(BCAST_MS * MS),
                )
            )
            enter = s + int(COMPUTE_MS[rank] * MS)
            done = s + int((LAST_ARRIVAL_MS + TRANSFER_MS[step]) * MS)
            writer.add_event(
                _call(rank, step, 2 * step + 1, "all_reduce", ALLREDUCE_BYTES, enter, done)
            )
            writer.add_step((rank, step, s, s + int(STEP_MS * MS), 0))
        writer.close()
    return out
