"""Traces with device times whose truth is known by construction.

The device runs the job: every step each rank computes, then joins the step's
all-reduces one after another; an all-reduce ends ``transfer_ns`` after its last member
reached it, on every member. A rank's device may take longer before the step's first
call (``device_delay``: a slow GPU, or a device idle while its CPU is late). The host
times are the device's less the rank's CPU run-ahead (``run_ahead``): a CPU ahead of
its device enqueues early, a late CPU enqueues late and leaves its device waiting (a
run-ahead near zero). NCCL's host completion is the enqueue: the call is waited on at
once and its host exit is 20 µs after the enqueue. Written through the project's own
writer, rows in the order of ``syncpace.trace.columns.EVENT_COLUMNS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from syncpace.trace.writer import RankTraceWriter

MS = 1_000_000
US = 1_000


@dataclass(frozen=True)
class DeviceRun:
    """What the builder plants, per rank (missing ranks: 0 delay, ``base_run_ahead``)."""

    ranks: int = 4
    steps: int = 12
    calls: int = 2  # all-reduces per step
    bytes: int = 64 << 20
    compute_ns: int = 40 * MS  # device compute before each call
    transfer_ns: int = 5 * MS
    optimizer_ns: int = 3 * MS  # device work after the step's last call
    base_run_ahead: int = 15 * MS
    device_delay: dict[int, int] = field(default_factory=dict)
    run_ahead: dict[int, int] = field(default_factory=dict)
    #: device clock uncertainty in the metadata; None: no device clock declared and
    #: every device time -1 (the same run as the host alone saw it)
    device_uncertainty_ns: int | None = 12 * US
    #: (rank, step) whose calls lack device times (a mixed run)
    lacking: frozenset[tuple[int, int]] = frozenset()
    start_ns: int = 1_000_000_000

    def ahead(self, rank: int) -> int:
        return self.run_ahead.get(rank, self.base_run_ahead)

    def delay(self, rank: int) -> int:
        return self.device_delay.get(rank, 0)


@dataclass(frozen=True)
class Call:
    """One call as planted: on the device and on the host."""

    rank: int
    step: int
    seq: int
    device_enter: int
    device_exit: int
    host_enter: int


def plant(run: DeviceRun) -> tuple[list[Call], dict[int, list[tuple[int, int, int]]]]:
    """The calls and, per rank, its steps (step, device start, device end)."""
    calls: list[Call] = []
    steps: dict[int, list[tuple[int, int, int]]] = {r: [] for r in range(run.ranks)}
    start = run.start_ns
    seq = 0
    for step in range(run.steps):
        ready = {r: start for r in range(run.ranks)}  # when each device may compute
        for k in range(run.calls):
            arrive = {
                r: ready[r] + run.compute_ns + (run.delay(r) if k == 0 else 0)
                for r in range(run.ranks)
            }
            end = max(arrive.values()) + run.transfer_ns
            for r in range(run.ranks):
                calls.append(Call(r, step, seq, arrive[r], end, arrive[r] - run.ahead(r)))
                ready[r] = end
            seq += 1
        finish = end + run.optimizer_ns
        for r in range(run.ranks):
            steps[r].append((step, start, finish))
        start = finish
    return calls, steps


def write_device_run(root: Path, run: DeviceRun) -> Path:
    """Write ``run`` to ``root`` (one node per two ranks)."""
    calls, steps = plant(run)
    declared = run.device_uncertainty_ns is not None
    for rank in range(run.ranks):
        meta = {
            "world_size": run.ranks,
            "host": f"node{rank // 2}",
            "local_rank": rank % 2,
            "clock": {"offset_ns": 0, "uncertainty_ns": 0},
            "groups": {"0": {"ranks": list(range(run.ranks))}},
            "source": "synthetic",
            "device": f"cuda:{rank % 2}",
            "backend": "nccl",
        }
        if declared:
            meta["device_clock"] = {
                "source": "cuda_event",
                "uncertainty_ns": run.device_uncertainty_ns,
                "anchors": 4,
                "resolved": sum(1 for c in calls if c.rank == rank),
                "unresolved": 0,
            }
        w = RankTraceWriter(root, rank, meta, flush_interval_s=3600, offset_ns=lambda: 0)
        for c in (c for c in calls if c.rank == rank):
            seen = declared and (c.rank, c.step) not in run.lacking
            w.add_event(
                (
                    c.rank,
                    c.step,
                    "0",
                    run.ranks,
                    c.seq,
                    "all_reduce",
                    run.bytes,
                    "bfloat16",
                    -1,
                    c.host_enter,
                    c.host_enter + 20 * US,
                    "wait",
                    "completed",
                    None,
                    c.host_enter + 10 * US,
                    c.device_enter if seen else -1,
                    c.device_exit if seen else -1,
                )
            )
        for step, start, end in steps[rank]:
            ahead = run.ahead(rank)
            w.add_step((rank, step, start - ahead, end - ahead, 0))
        w.close()
    return root
