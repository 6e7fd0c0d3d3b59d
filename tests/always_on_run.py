"""A small always-on run through the real writer (rotated segments, per-step summaries)
and the live monitor's detection lines, for the whole-run tests: rank 1's steps are
slower from SLOW_FROM to SLOW_TO; every number is derived from what is written here."""

from __future__ import annotations

from pathlib import Path

from syncpace.trace import RankTraceWriter, schema, wholerun
from syncpace.trace.segments import RotationPolicy

WORLD, PER_STEP, STEPS = 3, 4, 300
STEP_NS = 10_000_000
SLOW_FROM, SLOW_TO, SLOW_NS = 100, 150, 4_000_000  # rank 1's steps take longer here
CALL_NS, WAIT_NS = 200_000, 150_000


def step_ns(rank: int, step: int) -> int:
    return STEP_NS + (SLOW_NS if rank == 1 and SLOW_FROM <= step < SLOW_TO else 0) + 1000 * rank


def write_run(
    root: Path, steps: int = STEPS, host: str = "n", detections: dict[int, int] | None = None
) -> None:
    """``detections``: per rank, the detections its metadata declares (as the live
    monitor's account does at close)."""
    policy = RotationPolicy(segment_s=1e-9, keep_s=0, budget_bytes=200_000)
    writers = [
        RankTraceWriter(root, r, {"world_size": WORLD, "host": f"{host}{r}"}, flush_interval_s=3600,
                        rotation=policy, summaries=True)
        for r in range(WORLD)
    ]  # fmt: skip
    start = [1_000_000_000] * WORLD
    for step in range(steps):
        for r, w in enumerate(writers):
            for slot in range(PER_STEP):
                enter = start[r] + slot * 1_000_000
                exit_ = enter + CALL_NS
                w.add_event((r, step, "0", WORLD, step * PER_STEP + slot, "all_reduce", 4096,
                             "float32", -1, enter, exit_, "wait", "completed", None,
                             exit_ - WAIT_NS))  # fmt: skip
            w.add_step((r, step, start[r], start[r] + step_ns(r, step), 0))
            start[r] += step_ns(r, step) + 1
        if step % 10 == 9:
            for w in writers:
                w.flush()
    for r, w in enumerate(writers):
        if detections is not None and r in detections:
            w.close(monitor={"detections": detections[r]})
        else:
            w.close()


def detection(kind: str, state: str, step: int, rank: int | None = None, **extra) -> str:
    """A line as the live monitor writes it (checksummed)."""
    record = {"kind": kind, "state": state, "step": step, "rank": rank, "share": 0.9,
              "cost": 0.25, "steps_seen": 10, **extra}  # fmt: skip
    return wholerun.detection_line(record)


def write_detections(root: Path, lines: dict[int, list[str]]) -> None:
    for rank, rows in lines.items():
        path = root / f"{schema.rank_stem(rank)}{schema.MONITOR_SUFFIX}"
        path.write_text("".join(line + "\n" for line in rows), encoding="utf-8")


GOOD = [
    detection("straggler", "start", 112, 1, since_step=101),
    detection("step_time_jump", "start", 119, median_s=0.014, baseline_s=0.01),
    detection("straggler", "stop", 163, 1, since_step=101),
    detection("step_time_jump", "stop", 169, median_s=0.01, baseline_s=0.01),
    detection("straggler", "start", 280, 2, since_step=271),  # still on at the end
]
