"""The replay engine on hand-built traces whose every number is known, and on the saved
fixtures: the plain replay gives back the measured iterations, each counterfactual
changes exactly what it says."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from syncpace.analysis import compute_metrics
from syncpace.analysis.replay import Change, program, run, same_program
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.analysis.replay.whatif import baseline, evaluate
from syncpace.analysis.streaming import same_metrics, stream_metrics
from syncpace.trace import load_trace
from syncpace.trace.writer import RankTraceWriter

MS = 1_000_000
DATA = Path(__file__).resolve().parents[1] / "data"


def write(
    root: Path,
    events: dict[int, list[tuple]],
    steps: dict[int, list[tuple]],
    one_host: bool = False,
) -> Path:
    """Event rows: (step, seq, bytes, enter, exit, timing, wait_ns); steps (step, start,
    end[, backward: when its first backward pass began]). A host per rank, or every rank
    on one host (``one_host``: no fabric to blame)."""
    world = len(steps)
    for rank in range(world):
        meta = {
            "world_size": world,
            "host": "node0" if one_host else f"node{rank}",
            "local_rank": rank if one_host else 0,
            "clock": {"offset_ns": 0, "uncertainty_ns": 0},
            "groups": {"0": {"ranks": list(range(world)), "backend": "gloo"}},
            "source": "synthetic",
        }
        w = RankTraceWriter(root, rank, meta, flush_interval_s=3600, offset_ns=lambda: 0)
        for step, seq, nbytes, enter, exit_, timing, wait in events.get(rank, []):
            row = (rank, step, "0", world, seq, "all_reduce", nbytes, "float32", -1)
            w.add_event((*row, enter, exit_, timing, "completed", None, wait))
        for step, start, end, *backward in steps[rank]:
            w.add_step((rank, step, start, end, 0, 0, backward[0] if backward else -1))
        w.close()
    return root


def blocking_job(root: Path, compute: dict[int, float], steps: int = 6, xfer: float = 4) -> Path:
    """Each step every rank computes ``compute[rank]`` ms, then one blocking 1 MB
    all-reduce that transfers ``xfer`` ms after the last rank arrives, then the step
    ends 1 ms later. Built the way the job itself would run."""
    ranks = sorted(compute)
    events: dict[int, list] = {r: [] for r in ranks}
    rank_steps: dict[int, list] = {r: [] for r in ranks}
    start = dict.fromkeys(ranks, 0.0)
    for s in range(steps):
        enter = {r: start[r] + compute[r] for r in ranks}
        done = max(enter.values()) + xfer
        for r in ranks:
            e = int(enter[r] * MS)
            events[r].append((s, s, 1_000_000, e, int(done * MS), "wait", e + 1000))
            end = done + 1
            rank_steps[r].append((s, int(start[r] * MS), int(end * MS)))
            start[r] = end
    return write(root, events, rank_steps)


def program_of(path: Path):
    m = compute_metrics(load_trace(path))
    assert m.program is not None
    return m, m.program


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in DATA.iterdir() if p.is_dir() and (p / "rank-00000.meta.json").exists()),
)
def test_plain_replay_gives_back_the_measured_iterations(name: str) -> None:
    m, prog = program_of(DATA / name)
    replayed = run(prog)
    assert replayed.unresolved == 0 and prog.violations == 0
    measured = m.steps.filter(m.steps["step"].is_in(prog.steps.tolist()))["time_ns"].to_numpy()
    np.testing.assert_allclose(replayed.iteration_ns, measured, rtol=1e-9)


def test_a_slow_rank_at_the_others_compute_saves_exactly_its_excess(tmp_path: Path) -> None:
    # rank 1 computes 30 ms, the others 20: every iteration is 30 + 4 + 1 = 35 ms; with
    # rank 1 at 20 ms it is 25 ms
    _, prog = program_of(blocking_job(tmp_path, {0: 20, 1: 30, 2: 20, 3: 20}))
    base = baseline(prog)
    assert base.measured_ns == pytest.approx(35 * MS)
    assert base.replayed_ns == pytest.approx(35 * MS)
    out = evaluate(prog, base, "x", "rank 1 like the others", cf.compute_like_others(prog, [1]))
    assert out.iteration_ns == pytest.approx(25 * MS, rel=1e-6)
    assert out.saving == pytest.approx(10 / 35, rel=1e-6)
    # removing a rank that is not slow saves nothing
    other = evaluate(prog, base, "y", "rank 0", cf.compute_like_others(prog, [0]))
    assert other.saving == pytest.approx(0.0, abs=1e-9)


def test_links_at_a_rate_cap_each_transfer_at_the_model_time(tmp_path: Path) -> None:
    # 1 MB all-reduce over 4 ranks moves 1.5 MB per rank: at 1 GB/s busbw that is 1.5 ms
    # instead of the measured 4 ms, so every iteration is 2.5 ms shorter
    _, prog = program_of(blocking_job(tmp_path, {0: 20, 1: 20, 2: 20, 3: 20}))
    base = baseline(prog)
    out = evaluate(prog, base, "x", "1 GB/s", cf.transfers_at_rate(prog, 1.0))
    assert base.replayed_ns - out.iteration_ns == pytest.approx(2.5 * MS, rel=1e-6)
    faster_than_measured = evaluate(prog, base, "y", "1 MB/s", cf.transfers_at_rate(prog, 1e-3))
    assert faster_than_measured.saving == pytest.approx(0.0, abs=1e-9)  # only ever removes time


def test_half_the_bytes_keeps_the_latency_fitted_over_the_runs_sizes(tmp_path: Path) -> None:
    """Each step: 20 ms compute, then blocking all-reduces of 1 MB and 4 MB that take
    2 ms of latency plus 1 ms a MB (3 and 6 ms). With half the bytes they take 2.5 and
    4 ms: 2.5 ms saved a step, not the 4.5 ms of time proportional to bytes."""
    ranks = range(4)
    events: dict[int, list] = {r: [] for r in ranks}
    steps: dict[int, list] = {r: [] for r in ranks}
    t = 0.0
    for s in range(8):
        at = t + 20
        for k, mb in enumerate((1, 4)):
            done = at + 2 + mb
            for r in ranks:
                e = int((at + 0.01 * r) * MS)
                events[r].append((s, 2 * s + k, mb * 1_000_000, e, int(done * MS), "wait", e))
            at = done
        for r in ranks:
            steps[r].append((s, int(t * MS), int((at + 1) * MS)))
        t = at + 1
    _, prog = program_of(write(tmp_path, events, steps))
    large = np.ones(len(prog.service), dtype=bool)
    fixed = cf.own_latency(prog, large)
    assert fixed == pytest.approx(2 * MS, rel=0.02)
    base = baseline(prog)
    out = evaluate(prog, base, "half", "half", cf.transfers_scaled(prog, 0.5, large, fixed))
    assert base.replayed_ns - out.iteration_ns == pytest.approx(2.5 * MS, rel=0.02)
    # one size alone cannot tell the latency from the bytes' time
    one = np.asarray(prog.instances["bytes"] == 4_000_000)
    assert cf.own_latency(prog, one) is None


def test_transfers_slowed_into_each_other_run_alone_at_the_link_rate(tmp_path: Path) -> None:
    """Two async 1 MB all-reduces posted 10 ms apart, each 300 ms in service, so side
    by side for most of it. At 1 GB/s busbw each takes 1 ms (2 ranks move 1 MB): they
    no longer meet, and each is capped at 1 ms, not at twice that."""
    events: dict[int, list] = {0: [], 1: []}
    steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(5):
        for r in (0, 1):
            for k in range(2):
                p = int((t + 20 + 10 * k) * MS)
                done = int((t + 320 + 10 * k) * MS)
                events[r].append((s, 2 * s + k, 1_000_000, p, done, "future", -1))
            steps[r].append((s, int(t * MS), int((t + 331) * MS)))
        t += 331
    _, prog = program_of(write(tmp_path, events, steps))
    assert (prog.instances["concurrent"].to_numpy() > 1.9).sum() >= 5
    change = cf.transfers_at_rate(prog, 1.0)
    np.testing.assert_allclose(change.service, 1 * MS, rtol=1e-6)
    # posted together, they would still share the link at that speed
    slow = np.full(len(prog.service), 400.0 * MS)
    assert np.all(cf.shared_model(prog, 0.0, slow) > 1.9 * slow)


def test_a_pacer_delays_the_first_collective_lag_steps_later(tmp_path: Path) -> None:
    Decided = namedtuple("Decided", "apply_at delays_s")  # what control.Pacer returns
    _, prog = program_of(blocking_job(tmp_path, {0: 20, 1: 30, 2: 20, 3: 20}, steps=8))

    class Hold:
        """Always delays rank 0 by 5 ms: rank 0 is early by 10 ms, so no iteration grows."""

        def __init__(self, world: int) -> None:
            self.world = world

        def observe(self, step, arrivals, step_time):
            assert len(arrivals) == self.world and step_time == pytest.approx(0.035)
            assert arrivals[1] == pytest.approx(arrivals.max())  # rank 1 arrives last
            return Decided(step + 2, np.array([0.005, 0, 0, 0]))

    class Late(Hold):
        """Delays the last rank: every paced iteration grows by the delay."""

        def observe(self, step, arrivals, step_time):
            return Decided(step + 2, np.array([0, 0.005, 0, 0]))

    plain = run(prog).iteration_ns
    held = run(prog, Change(pacer=Hold))
    np.testing.assert_allclose(held.iteration_ns, plain)
    assert held.pacing["paced_steps"] == len(prog.steps)
    late = run(prog, Change(pacer=Late)).iteration_ns
    # decisions from the first replayed step apply two steps later
    np.testing.assert_allclose(late[:2], plain[:2])
    np.testing.assert_allclose(late[2:], plain[2:] + 5 * MS)


def test_two_buckets_in_service_at_once_are_not_queued(tmp_path: Path) -> None:
    """gloo-like: two 1 MB buckets posted together, both in service for 8 ms (sharing
    the link), a third queued until the first ends. Measured concurrency is 2; the
    shared ones are 2 apart in 'concurrent', and the third's service is its own 4 ms."""
    events: dict[int, list] = {0: [], 1: []}
    steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(6):
        post = t + 20
        for r in (0, 1):
            p = int((post + 0.1 * r) * MS)
            fut = "future"
            events[r] += [
                (s, 3 * s, 1_000_000, p, int((post + 8) * MS), fut, -1),
                (s, 3 * s + 1, 1_000_000, p + 10_000, int((post + 8.05) * MS), fut, -1),
                (s, 3 * s + 2, 1_000_000, p + 20_000, int((post + 12) * MS), fut, -1),
            ]
            steps[r].append((s, int(t * MS), int((post + 13) * MS)))
        t = post + 13
    m, prog = program_of(write(tmp_path, events, steps))
    inst = m.instances.sort("seq")
    assert set(inst["concurrency"].to_list()) == {2}
    third = inst.filter(inst["seq"] % 3 == 2)
    assert third["queued_ns"].min() > 7 * MS  # waited for a slot
    assert third["service_ns"].to_numpy() == pytest.approx(np.full(third.height, 4 * MS), rel=0.01)
    pair = inst.filter(inst["seq"] % 3 == 0)
    assert pair["service_ns"].min() > 7.8 * MS  # not 0.05 ms: it ran beside its sibling
    assert run(prog).mean_ns == pytest.approx(33 * MS, rel=1e-6)


def test_a_late_wait_only_bounds_the_completion(tmp_path: Path) -> None:
    """Both ranks post a 4 MB all-reduce; rank 1 waits at once and sees it end 10 ms
    later, rank 0 computes 50 ms first and its wait returns at once. Rank 0's exit says
    'done by then', not 'took 50 ms': the instance took 10 ms."""
    events: dict[int, list] = {0: [], 1: []}
    steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(5):
        post = int((t + 1) * MS)
        late = int((t + 51) * MS)
        events[0].append((s, s, 4_000_000, post, late + 20_000, "wait", late))
        events[1].append((s, s, 4_000_000, post, post + 10 * MS, "wait", post + 1000))
        for r in (0, 1):
            steps[r].append((s, int(t * MS), int((t + 52) * MS)))
        t += 52
    m, prog = program_of(write(tmp_path, events, steps))
    inst = m.instances
    assert not inst["exit_bounded"].any()  # rank 1 saw the completion
    assert inst["transfer_ns"].to_list() == [10 * MS] * inst.height
    assert inst["busbw_gbps"].null_count() == 0
    np.testing.assert_allclose(run(prog).iteration_ns, 52 * MS)
    # twice as long: rank 1 waits 10 ms more; rank 0 still finds it done
    slow = run(prog, Change(service=prog.service * 2)).iteration_ns
    np.testing.assert_allclose(slow[1:] - slow[:-1], 0.0, atol=1)
    assert slow[0] == pytest.approx(62 * MS)
    # half as long: rank 0's end still sets the iteration
    np.testing.assert_allclose(run(prog, Change(service=prog.service / 2)).iteration_ns, 52 * MS)


def test_no_exact_completion_leaves_the_instance_bounded(tmp_path: Path) -> None:
    events: dict[int, list] = {0: [], 1: []}
    steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(4):
        post, late = int((t + 1) * MS), int((t + 51) * MS)
        for r in (0, 1):
            events[r].append((s, s, 4_000_000, post, late + 20_000, "wait", late))
            steps[r].append((s, int(t * MS), int((t + 52) * MS)))
        t += 52
    m, _ = program_of(write(tmp_path, events, steps))
    assert m.instances["exit_bounded"].all()
    assert m.instances["busbw_gbps"].null_count() == m.instances.height


@pytest.mark.parametrize("marked", [False, True])
def test_ideal_overlap_spreads_a_burst_over_backward_where_the_trace_marks_it(
    tmp_path: Path, marked: bool
) -> None:
    """Each step: 40 ms compute (30 ms of forward, 10 ms of backward), then 4 blocking
    1 MB all-reduces of 5 ms each: 20 ms exposed, 61 ms a step. With backward's start
    marked in the trace, gradients exist from then on: issued during backward, at 2.5 ms
    intervals, the four transfers queue on the link; the last ends 52.5 ms in, the step
    at 53.5 ms. Unmarked, the whole compute is taken for backward: issued every 10 ms
    and waited at the step's end, only the last is exposed, 40 + 5 + 1 = 46 ms, an
    upper bound."""
    events: dict[int, list] = {0: [], 1: []}
    steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(5):
        for r in (0, 1):
            at = t + 40
            for k in range(4):
                e = int((at + 5 * k) * MS)
                events[r].append((s, 4 * s + k, 1_000_000, e, e + 5 * MS, "wait", e + 1000))
            mark = [int((t + 30) * MS)] if marked else []
            steps[r].append((s, int(t * MS), int((t + 61) * MS), *mark))
        t += 61
    _, prog = program_of(write(tmp_path, events, steps))
    assert np.isfinite(prog.backward).all() == marked
    out = evaluate(prog, baseline(prog), "overlap", "ideal overlap", cf.ideal_overlap(prog))
    assert out.iteration_ns == pytest.approx((53.5 if marked else 46) * MS, rel=1e-3)


def two_transfers_after_compute(root: Path, backward_ms: float | None = None) -> Path:
    """Each step: 40 ms compute, then two 1 MB async all-reduces posted together, in
    service side by side for 8 ms (4 ms each alone), the step's end 1 ms after; its
    backward pass marked ``backward_ms`` before the burst (None: no mark)."""
    events: dict[int, list] = {0: [], 1: []}
    steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(6):
        post = t + 40
        mark = [] if backward_ms is None else [int((post - backward_ms) * MS)]
        for r in (0, 1):
            p = int((post + 0.01 * r) * MS)
            events[r] += [
                (s, 2 * s, 1_000_000, p, int((post + 8) * MS), "future", -1),
                (s, 2 * s + 1, 1_000_000, p + 10_000, int((post + 8.05) * MS), "future", -1),
            ]
            steps[r].append((s, int(t * MS), int((post + 9) * MS), *mark))
        t = post + 9
    return write(root, events, steps)


def test_ideal_overlap_lets_spread_transfers_run_alone(tmp_path: Path) -> None:
    """The two transfers spread over the compute (posted at 20 and 40 ms) no longer
    share the link: the last ends 4 ms after the compute, the step at 45 ms, not 49."""
    m, prog = program_of(two_transfers_after_compute(tmp_path))
    assert set(m.instances["concurrency"].to_list()) == {2}
    base = baseline(prog)
    assert base.measured_ns == pytest.approx(49 * MS, rel=1e-3)
    change = cf.ideal_overlap(prog)
    assert change.service is not None
    np.testing.assert_allclose(change.service, prog.service / 2, rtol=0.02)
    out = evaluate(prog, base, "overlap", "ideal overlap", change)
    assert out.iteration_ns == pytest.approx(45 * MS, rel=0.01)


def test_transfers_spread_closer_than_their_time_alone_share_the_link(tmp_path: Path) -> None:
    """The same job with backward marked 6 ms before the burst: spread over it, the two
    transfers are posted 3 ms apart (at 37 and 40 ms), closer than their 4 ms alone.
    Sharing the link as a link does, the first runs alone 3 ms, then both at half rate:
    it ends at 42, the second at 45, the step at 46 ms. Taken at their measured 8 ms
    (spaced under their time alone) they would save nothing (49); at their time alone
    they would carry more than the link (45)."""
    _, prog = program_of(two_transfers_after_compute(tmp_path, backward_ms=6))
    out = evaluate(prog, baseline(prog), "overlap", "ideal overlap", cf.ideal_overlap(prog))
    assert out.iteration_ns == pytest.approx(46 * MS, abs=0.5 * MS)


def test_no_jitter_is_the_compute_without_its_added_noise(tmp_path: Path) -> None:
    """Four ranks compute 40 ms plus heavy-tailed extra time (Lomax shape 2, scale
    0.35 of the compute: median 15 %), then a blocking all-reduce of 4 ms and 1 ms to
    the step's end. Jitter only adds time: without it each step is 45 ms, which the
    replay must find, not the 40 ms plus the median extra."""
    rng = np.random.default_rng(7)
    ranks, n = range(4), 40
    events: dict[int, list] = {r: [] for r in ranks}
    steps: dict[int, list] = {r: [] for r in ranks}
    t = 0.0
    for s in range(n):
        enter = {r: t + 40 * (1 + 0.35 * rng.pareto(2.0)) for r in ranks}
        done = max(enter.values()) + 4
        for r in ranks:
            e = int(enter[r] * MS)
            events[r].append((s, s, 1_000_000, e, int(done * MS), "wait", e + 1000))
            steps[r].append((s, int(t * MS), int((done + 1) * MS)))
        t = done + 1
    _, prog = program_of(write(tmp_path, events, steps))
    base = baseline(prog)
    assert base.measured_ns > 60 * MS  # the slowest of four draws, every step
    out = evaluate(prog, base, "jitter", "no jitter", cf.without_jitter(prog))
    # each rank's calm value comes from 40 draws: the slowest rank's is a little high
    assert out.iteration_ns == pytest.approx(45 * MS, rel=0.06)
    median = cf.position_medians(prog)
    at_median = Change(gap=np.minimum(prog.gap, np.where(np.isnan(median), prog.gap, median)))
    got = evaluate(prog, base, "median", "at the median", at_median).iteration_ns
    assert out.iteration_ns - 45 * MS < (got - 45 * MS) / 2


def test_combined_changes_never_save_less_than_each(tmp_path: Path) -> None:
    _, prog = program_of(blocking_job(tmp_path, {0: 20, 1: 30, 2: 20, 3: 20}))
    base = baseline(prog)
    a, b = cf.compute_like_others(prog, [1]), cf.transfers_at_rate(prog, 1.0)
    both = evaluate(prog, base, "ab", "both", cf.combine([a, b]))
    for one in (a, b):
        assert both.saving >= evaluate(prog, base, "one", "one", one).saving - 1e-12
    assert both.iteration_ns == pytest.approx(22.5 * MS, rel=1e-6)


@pytest.mark.parametrize("name", ["straggler", "real_ddp_straggler", "poor_overlap"])
@pytest.mark.parametrize("window_events", [1, 1_000_000])
def test_streamed_program_is_the_loaded_one(
    name: str, window_events: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run read a window at a time replays the same program as the run read whole,
    also when the replay covers only a block of the steps (its events read again)."""
    monkeypatch.setattr(program, "MAX_EVENTS", 1)  # the first two steps only
    loaded = compute_metrics(load_trace(DATA / name))
    streamed, _ = stream_metrics(DATA / name, window_events=window_events)
    assert loaded.program is not None and streamed.program is not None
    assert list(loaded.program.steps) == sorted(loaded.steps["step"].to_list())[:2]
    assert same_program(loaded.program, streamed.program)
    assert same_metrics(loaded, streamed) == []
    # and the comparison can fail: one gap changed, or another block of steps
    gap = streamed.program.gap.copy()
    gap[len(gap) // 2] += 1.0
    assert not same_program(loaded.program, dataclasses.replace(streamed.program, gap=gap))
    monkeypatch.setattr(program, "MAX_EVENTS", 10**9)
    whole, _ = stream_metrics(DATA / name, window_events=window_events)
    assert whole.program is not None and len(whole.program.steps) > 2
    assert not same_program(loaded.program, whole.program)
