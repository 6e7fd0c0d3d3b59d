"""Re-bucketing on hand-built traces whose every number is known: communication issued
in one bucket after compute, split into buckets issued during it. Each expected
iteration is worked out by hand from the program (the module docstring's model: a
bucket of B/k bytes takes α + (T - m α)/k, bucket i ready at W i/k, buckets one after
another on the link, the last one exposed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_replay import write as write_trace

from syncpace.analysis import analyze, compute_metrics
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.analysis.replay import rebucket
from syncpace.analysis.replay.whatif import baseline, evaluate
from syncpace.trace import load_trace

MS = 1_000_000
MIB = 1 << 20
KNEE = 1 << 20


def write(root: Path, events: dict[int, list[tuple]], steps: dict[int, list[tuple]]) -> Path:
    """The trace writer of the replay tests, every rank on one host: no fabric to blame."""
    return write_trace(root, events, steps, one_host=True)


def one_bucket_job(
    root: Path,
    compute: float,
    transfer: float,
    nbytes: int = 32 * MIB,
    small: float = 0.0,
    steps: int = 8,
) -> Path:
    """Two ranks; each step ``compute`` ms, then every gradient (``nbytes``) in one
    asynchronous all-reduce of ``transfer`` ms (DDP's future, joined when it is done),
    then, with ``small``, a blocking 4-byte all-reduce of ``small`` ms (the loss), and
    the step ends 1 ms later."""
    events: dict[int, list] = {0: [], 1: []}
    rank_steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(steps):
        post = t + compute
        done = post + transfer
        for r in (0, 1):
            p = int((post + 0.01 * r) * MS)
            events[r].append((s, 2 * s, nbytes, p, int(done * MS), "future", -1))
            if small:
                e = int((done + 0.01 * r) * MS)
                end_small = int((done + 0.01 + small) * MS)
                events[r].append((s, 2 * s + 1, 4, e, end_small, "wait", e + 1000))
        end = done + small + 1
        for r in (0, 1):
            rank_steps[r].append((s, int(t * MS), int(end * MS)))
        t = end
    return write(root, events, rank_steps)


def program_of(path: Path):
    m = compute_metrics(load_trace(path))
    assert m.program is not None
    return m.program


def test_ideal_overlap_has_nothing_to_spread_in_one_bucket(tmp_path: Path) -> None:
    # the miss this counterfactual is for: one call after compute, ideal overlap saves 0
    prog = program_of(one_bucket_job(tmp_path, compute=100, transfer=40))
    base = baseline(prog)
    assert base.replayed_ns == pytest.approx(141 * MS, rel=1e-3)
    out = evaluate(prog, base, "overlap", "ideal overlap", cf.ideal_overlap(prog))
    assert out.saving == pytest.approx(0.0, abs=1e-6)


def test_four_buckets_leave_the_last_one_exposed(tmp_path: Path) -> None:
    # W = 100, T = 40, α = 2: s = 2 + 38/4 = 11.5 ms < W/k = 25: the link keeps up, only
    # the last bucket is exposed: 100 + 11.5 + 1 = 112.5 ms instead of 141
    prog = program_of(one_bucket_job(tmp_path, compute=100, transfer=40))
    base = baseline(prog)
    change = rebucket.rebucketed(prog, 4, 2 * MS, KNEE)
    out = evaluate(prog, base, "r", "4 buckets", change)
    assert out.iteration_ns == pytest.approx(112.5 * MS, rel=1e-3)


def test_buckets_the_link_cannot_keep_up_with_wait_for_each_other(tmp_path: Path) -> None:
    # W = 20, T = 40, α = 0, k = 4: s = 10 ms > W/k = 5: bucket 1 starts at 5 ms and the
    # four run back to back until 45 ms, 25 ms after the compute: 20 + 25 + 1 = 46 ms
    prog = program_of(one_bucket_job(tmp_path, compute=20, transfer=40))
    base = baseline(prog)
    assert base.replayed_ns == pytest.approx(61 * MS, rel=1e-3)
    out = evaluate(prog, base, "r", "4 buckets", rebucket.rebucketed(prog, 4, 0.0, KNEE))
    assert out.iteration_ns == pytest.approx(46 * MS, rel=1e-3)


def test_the_best_count_weighs_latency_against_the_compute_left_to_hide_behind(
    tmp_path: Path,
) -> None:
    # W = 40, T = 40, α = 2: tails k=2: max(21, 20+42-40) = 22; k=4: max(11.5, 10+46-40)
    # = 16; k=8: max(6.75, 5+54-40) = 19; k=16: max(4.375, 2.5+70-40) = 32.5; DDP's
    # 25 MiB cap gives 2 buckets of the 32 MiB. Best: 4 buckets, 40 + 16 + 1 = 57 ms.
    prog = program_of(one_bucket_job(tmp_path, compute=40, transfer=40))
    found = rebucket.best_rebucketing(prog, 2 * MS, "given", KNEE)
    assert found is not None
    chosen, change = found
    assert chosen.buckets == 4
    assert chosen.cap_mb == pytest.approx(8.0)
    out = evaluate(prog, baseline(prog), "r", "best", change)
    assert out.iteration_ns == pytest.approx(57 * MS, rel=1e-3)
    # with much more compute to hide behind, more buckets win: k=16, 4.375 ms exposed
    prog = program_of(one_bucket_job(tmp_path / "long", compute=100, transfer=40))
    found = rebucket.best_rebucketing(prog, 2 * MS, "given", KNEE)
    assert found is not None and found[0].buckets == 16


def test_without_a_latency_no_bucket_is_smaller_than_the_knee(tmp_path: Path) -> None:
    # 4 MiB in one bucket, α unknown (0): time taken as proportional to bytes would
    # favour ever smaller buckets; buckets stop at the 1 MiB knee: 4 of them, s = 10 ms
    prog = program_of(one_bucket_job(tmp_path, compute=100, transfer=40, nbytes=4 * MIB))
    found = rebucket.best_rebucketing(prog, 0.0, "none", KNEE)
    assert found is not None
    assert found[0].buckets == 4
    out = evaluate(prog, baseline(prog), "r", "best", found[1])
    assert out.iteration_ns == pytest.approx(111 * MS, rel=1e-3)
    # a burst smaller than two knees cannot be split at all
    prog = program_of(one_bucket_job(tmp_path / "tiny", compute=100, transfer=40, nbytes=KNEE))
    assert rebucket.best_rebucketing(prog, 0.0, "none", KNEE) is None


def test_buckets_already_reduced_during_compute_are_left_as_measured(tmp_path: Path) -> None:
    """Each step: 60 ms compute, a 16 MiB bucket (10 ms), 40 ms more compute, a second
    16 MiB bucket (10 ms), the end 1 ms after: communication already overlaps."""
    events: dict[int, list] = {0: [], 1: []}
    rank_steps: dict[int, list] = {0: [], 1: []}
    t = 0.0
    for s in range(6):
        for r in (0, 1):
            a, b = t + 60, t + 100
            events[r] += [
                (s, 2 * s, 16 * MIB, int(a * MS), int((a + 10) * MS), "future", -1),
                (s, 2 * s + 1, 16 * MIB, int(b * MS), int((b + 10) * MS), "future", -1),
            ]
            rank_steps[r].append((s, int(t * MS), int((t + 111) * MS)))
        t += 111
    prog = program_of(write(tmp_path, events, rank_steps))
    change = rebucket.rebucketed(prog, 4, 0.0, KNEE)
    assert change.service is None or (change.service == prog.service).all()
    assert rebucket.best_rebucketing(prog, 0.0, "none", KNEE) is None


def test_poor_overlap_comes_first_with_the_rebucketed_saving(tmp_path: Path) -> None:
    """The one-bucket job with a 4-byte loss all-reduce of 2 ms: the run's two sizes
    give α = 2 ms. Iteration 100 + 40 + 2 + 1 = 143 ms; in 16 buckets (s = 2 + 38/16 =
    4.375 ms) 100 + 4.375 + 2 + 1 = 107.375 ms: 24.9 % shorter. The bytes cost nothing
    beyond that but the last bucket (3 %): no bandwidth-bound finding claims it again."""
    path = one_bucket_job(tmp_path, compute=100, transfer=40, small=2.0)
    analysis = analyze(path)
    findings = [f for f in analysis.findings if not f.symptom]
    first = findings[0]
    assert first.mode == "poor_overlap", [(f.mode, f.cost) for f in findings]
    assert first.cost == pytest.approx(35.625 / 143, abs=0.005)
    assert first.evidence["rebucketing"]["buckets"] == 16
    assert first.evidence["rebucketing"]["bucket_cap_mb"] == pytest.approx(2.0)
    assert "bucket_cap_mb=2" in first.actions[0]
    assert "bandwidth_bound" not in {f.mode for f in analysis.findings}


def test_one_bucket_after_backward_is_poor_overlap_not_bandwidth(tmp_path: Path) -> None:
    """The miss this is for: one 32 MiB bucket after 100 ms of compute, 40 ms on the
    link, no latency known (one size): buckets stop at the 1 MiB knee's multiple, 16 of
    2 MiB, s = 2.5 ms, and the iteration is 100 + 2.5 + 1 = 103.5 ms of 141 (26.6 %).
    Ideal overlap saved 0 here and the bytes were the critical cause; the bytes beyond
    re-bucketing cost only the last bucket's 2.5 ms (1.8 %), under the threshold."""
    analysis = analyze(one_bucket_job(tmp_path, compute=100, transfer=40))
    first = analysis.findings[0]
    assert first.mode == "poor_overlap" and not first.symptom
    assert first.cost == pytest.approx(37.5 / 141, abs=0.002)
    assert "bandwidth_bound" not in {f.mode for f in analysis.findings}


def test_where_the_link_cannot_keep_up_the_bytes_cost_the_rest(tmp_path: Path) -> None:
    """20 ms of compute before 40 ms of transfer (32 MiB, α unknown): in 16 buckets the
    link is the limit, the last one ends 1.25 + 40 ms after the compute began: tail
    21.25 ms, 20 + 21.25 + 1 = 42.25 ms of 61 (30.7 %). With the bytes free too the
    iteration is 21 ms: the bytes cost the 21.25 ms left (34.8 %), more than overlap,
    so bandwidth_bound comes first and poor overlap is its symptom; the two costs add
    up to every transfer free, nothing claimed twice."""
    analysis = analyze(one_bucket_job(tmp_path, compute=20, transfer=40))
    by_mode = {f.mode: f for f in analysis.findings}
    bandwidth, overlap = by_mode["bandwidth_bound"], by_mode["poor_overlap"]
    assert analysis.findings[0].mode == "bandwidth_bound"
    assert bandwidth.cost == pytest.approx(21.25 / 61, abs=0.002)
    assert overlap.cost == pytest.approx(18.75 / 61, abs=0.002) and overlap.symptom
    every = analysis.what_if[0].row("no-network")
    assert every is not None
    assert bandwidth.cost + overlap.cost == pytest.approx(every.saving, abs=0.002)
