"""Always-on tracing: rotated event segments within a disk budget, pinned windows and
per-step summaries. The truth is what the test wrote: its events, steps and byte sizes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from syncpace.analysis import compute_metrics
from syncpace.trace import RankTraceWriter, load_trace, schema
from syncpace.trace.segments import RotationPolicy, SegmentedEvents, add_interval

PER_STEP = 40
STEP_NS = 10_000_000


def event(rank: int, step: int, slot: int, late_ns: int = 0) -> tuple:
    enter = 1_000_000_000 + step * STEP_NS + slot * 100_000 + late_ns
    seq = step * PER_STEP + slot
    return (rank, step, "0", 2, seq, "all_reduce", 4096 + slot, "float32", -1,
            enter, enter + 50_000, "wait", "completed", None, enter)  # fmt: skip


def step_row(rank: int, step: int) -> tuple:
    start = 1_000_000_000 + step * STEP_NS
    return (rank, step, start, start + STEP_NS - 1, 0)


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


def write_run(directory: Path, steps: int, policy: RotationPolicy, every: int = 5) -> list[int]:
    """Two ranks, ``steps`` steps, a flush every ``every`` steps; the disk use after
    each flush."""
    writers = [
        RankTraceWriter(
            directory,
            r,
            {"world_size": 2, "host": "h"},
            flush_interval_s=3600,
            rotation=policy,
            summaries=True,
        )  # fmt: skip
        for r in range(2)
    ]
    usage = []
    for step in range(steps):
        for r, w in enumerate(writers):
            for slot in range(PER_STEP):
                w.add_event(event(r, step, slot))
            w.add_step(step_row(r, step))
        if step % every == every - 1:
            for w in writers:
                w.flush()
                usage.append(w.disk_bytes())
    for w in writers:
        w.close()
    return usage


def events_on_disk(directory: Path, rank: int) -> int:
    stem = schema.rank_stem(rank)
    files = list(directory.glob(f"{stem}.events.*.arrow")) + list(
        directory.glob(f"{stem}{schema.EVENTS_SUFFIX}")
    )
    return sum(f.stat().st_size for f in files)


def test_the_disk_bound_holds_and_the_newest_steps_stay_whole(tmp_path):
    policy = RotationPolicy(segment_s=1e-9, keep_s=0, budget_bytes=600_000)
    usage = write_run(tmp_path, 400, policy)
    batch_bytes = 5 * PER_STEP * 200  # generous size of one flush's batch
    assert max(usage) <= policy.budget_bytes + batch_bytes
    for rank in range(2):
        assert events_on_disk(tmp_path, rank) <= policy.budget_bytes + batch_bytes
    trace = load_trace(tmp_path)
    seg = trace.meta[0]["segments"]
    assert seg["removed"] > 0 and seg["removed_events"] > 0
    # every event written is either on disk or accounted for as rotated out
    for rank in range(2):
        c = trace.completeness[rank]
        assert c.events_found + c.events_rotated == 400 * PER_STEP
        assert c.events_rotated == trace.meta[rank]["segments"]["removed_events"]
        assert not c.lossy
    # what is analysed: whole steps only, the newest ones, every call of each
    kept = trace.events.group_by("rank", "step").len()
    assert (kept["len"] == PER_STEP).all()
    assert trace.events["step"].max() == 399
    first_kept = int(trace.events["step"].min())
    assert trace.steps["step"].min() == first_kept  # steps without their events are out
    assert any("rotated out" in w for w in trace.warnings)
    metrics = compute_metrics(trace, warmup_steps=0)
    assert metrics.instances.height == (400 - first_kept) * PER_STEP


def test_summaries_cover_every_step_with_the_written_totals(tmp_path):
    write_run(tmp_path, 120, RotationPolicy(segment_s=1e-9, keep_s=0, budget_bytes=300_000))
    trace = load_trace(tmp_path)
    s = trace.summaries.sort("rank", "step")
    assert s.height == 2 * 120
    assert (s["calls"] == PER_STEP).all()
    assert (s["bytes"] == sum(4096 + k for k in range(PER_STEP))).all()
    assert (s["comm_ns"] == PER_STEP * 50_000).all()
    assert (s["blocked_ns"] == PER_STEP * 50_000).all()  # each waited from its entry
    assert (s["longest_ns"] == 50_000).all() and (s["failed"] == 0).all()
    assert trace.meta[1]["summaries_written"] == 120


def test_a_plain_run_has_one_events_file_and_no_summaries(tmp_path):
    w = RankTraceWriter(tmp_path, 0, {"world_size": 1, "host": "h"}, flush_interval_s=3600)
    for slot in range(10):
        w.add_event(event(0, 0, slot))
    w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rank-00000.events.arrow",
        "rank-00000.meta.json",
        "rank-00000.steps.arrow",
    ]
    trace = load_trace(tmp_path)
    assert trace.summaries.height == 0 and "segments" not in trace.meta[0]


def _stream_factory(tmp_path: Path):
    """Segments of a known size: each drain writes what is buffered, as the writer does."""

    class Sized:
        def __init__(self, path: Path) -> None:
            self.path, self.rows, self.written, self._size = path, None, 0, 100
            path.write_bytes(b"x" * 100)

        def drain(self, offset_ns: int):
            n = len(self.rows)
            if not n:
                return None
            steps = [self.rows.popleft()[1] for _ in range(n)]
            self._size += 100_000 * n
            self.path.write_bytes(b"x" * self._size)
            self.written += n
            return pa.record_batch({"step": pa.array(steps, pa.int64())})

        def size(self) -> int:
            return self._size

        def close(self) -> None:
            pass

    return Sized


def _segments(tmp_path: Path, policy: RotationPolicy, clock: FakeClock) -> SegmentedEvents:
    return SegmentedEvents(tmp_path, 0, _stream_factory(tmp_path), policy, clock=clock)


def _feed(seg: SegmentedEvents, clock: FakeClock, step: int, seconds: float = 1.0) -> None:
    seg.rows.append((0, step))
    clock.advance(seconds)
    seg.drain(0)


def test_old_segments_expire_but_a_pinned_window_survives(tmp_path):
    clock = FakeClock()
    seg = _segments(tmp_path, RotationPolicy(segment_s=1.0, keep_s=5.0, budget_bytes=10**9), clock)
    for step in range(10):
        _feed(seg, clock, step)
    seg.pin(before_s=1.5, after_s=0.5, reason="straggler start", step=9)
    for step in range(10, 40):
        _feed(seg, clock, step)
    kept = sorted(
        int(np.int64(p.name.split(".")[2])) if p.name.count(".") == 3 else 0
        for p in tmp_path.glob("rank-00000.events*.arrow")
    )
    # the pinned window (steps 8-9 and the one after) and the last 5 s are on disk
    assert {8, 9, 10} <= set(kept)
    assert min(k for k in kept if k > 10) >= 40 - 6
    assert not {0, 5, 20} & set(kept)
    account = seg.account.to_json()
    assert account["pins"] == [{"reason": "straggler start", "step": 9, "seconds": 2.0}]
    assert account["removed_steps"] == [[0, 7], [11, min(k for k in kept if k > 10) - 1]]


def test_the_budget_takes_pinned_segments_only_after_every_other(tmp_path):
    clock = FakeClock()
    policy = RotationPolicy(segment_s=1.0, keep_s=0, budget_bytes=1_000_000)  # 10 segments
    seg = _segments(tmp_path, policy, clock)
    _feed(seg, clock, 0)
    seg.pin(before_s=1.0, after_s=0.0, reason="control file", step=0)
    for step in range(1, 30):
        _feed(seg, clock, step)
        assert seg.disk_bytes() <= policy.budget_bytes
    names = {p.name for p in tmp_path.glob("rank-00000.events*.arrow")}
    assert "rank-00000.events.arrow" in names  # the pinned first segment
    assert "rank-00000.events.000001.arrow" not in names
    for step in range(30, 60):  # everything pinned, more than the budget: oldest go first
        seg.pin(before_s=0.0, after_s=2.0, reason="control file", step=step)
        _feed(seg, clock, step)
        assert seg.disk_bytes() <= policy.budget_bytes
    names = sorted(p.name for p in tmp_path.glob("rank-00000.events*.arrow"))
    assert names == [f"rank-00000.events.{k:06d}.arrow" for k in range(52, 61)]


def test_intervals_merge():
    got: list[list[int]] = []
    for a, b in [(5, 7), (0, 2), (3, 4), (10, 12), (11, 20)]:
        add_interval(got, a, b)
    assert got == [[0, 7], [10, 20]]


def test_a_pin_of_the_same_episode_extends_the_last_one(tmp_path):
    clock = FakeClock()
    seg = _segments(tmp_path, RotationPolicy(segment_s=1.0, keep_s=5.0, budget_bytes=10**9), clock)
    seg.pin(before_s=2.0, after_s=2.0, reason="stall", step=3)
    clock.advance(1.0)
    seg.pin(before_s=2.0, after_s=2.0, reason="stall", step=3)  # the watchdog's repeat
    clock.advance(10.0)
    seg.pin(before_s=2.0, after_s=2.0, reason="stall", step=9)  # a new episode
    assert [(p["step"], p["seconds"]) for p in seg.account.pins] == [(3, 5.0), (9, 4.0)]
