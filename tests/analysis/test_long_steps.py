"""Long steps: the tail of heavy-tailed jitter on every rank, or one-off stalls.

Each run is built twice from the same seed, with and without what is planted (the
heavy-tailed jitter, ``Planted.tail``: Lomax extra forward compute per rank and step;
a stall, ``Planted.stalls``), so its cost is measured from the two traces' iteration
times, not taken from the analysis.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from planted import Planted, generate
from syncpace.analysis import Severity, Thresholds, analyze
from syncpace.analysis.detectors.arrival import _standing_apart
from syncpace.report.verdict import build_verdict
from syncpace.trace import load_trace

#: Two ranks, 16 steps of 30 ms forward and 10 ms backward: the shape of a drawn job.
JOB = Planted(
    name="jitter_tail",
    nodes=1,
    gpus_per_node=2,
    steps=16,
    fwd_ms=30.0,
    bwd_ms=10.0,
    buckets=2,
    bucket_bytes=1 << 20,
)


def _iteration_ms(path: Path) -> tuple[float, float]:
    """Mean and longest step of rank 0 (every rank ends a step together), warm-up left
    out, read from the trace's own steps."""
    steps = load_trace(path).steps
    mine = steps.filter((steps["rank"] == 0) & (steps["step"] >= 1))
    took = (mine["end_ns"] - mine["start_ns"]).to_numpy() / 1e6
    return float(took.mean()), float(took.max())


def _run(tmp_path: Path, sc: Planted, name: str) -> Path:
    return generate(sc, tmp_path / name)


def test_heavy_tailed_jitter_with_a_long_step_is_jitter_at_its_measured_cost(tmp_path) -> None:
    """Seed 1 draws one forward several iterations long among jitter on every step:
    kept apart as a one-off stall, neither it (one step's saving, the other steps'
    variation as its error) nor the jitter without it cleared the reporting threshold,
    and a job 22 % slower than without the jitter read as healthy."""
    clean = _run(tmp_path, JOB.replace(seed=1), "clean")
    jittery = _run(tmp_path, JOB.replace(seed=1, tail=(2.5, 0.4)), "jittery")
    without, _ = _iteration_ms(clean)
    mean, longest = _iteration_ms(jittery)
    cost = (mean - without) / mean
    assert cost > 0.15, f"the jitter costs {cost:.1%}: not the case this test is about"
    assert longest > 2 * without, f"no long step ({longest:.1f} ms): not the case either"

    th = Thresholds()
    analysis = analyze(jittery, th)
    verdict = build_verdict(analysis)
    found = [(f.mode, f.severity.name, round(f.cost, 3)) for f in analysis.findings]
    assert not verdict.healthy, f"{verdict.headline!r}; findings {found}"
    first = analysis.findings[0]
    assert first.mode == "sync_amplification", found
    assert first.severity >= Severity.CRITICAL, found  # 22 % is beyond critical_cost (10 %)
    assert not [f for f in analysis.findings if f.mode == "stall"], found
    assert first.cost == pytest.approx(cost, abs=0.03), f"measured {cost:.1%}: {found}"


def test_a_one_step_stall_worth_reporting_in_a_short_run_is_a_stall(tmp_path) -> None:
    """Rank 1 stopped 40 ms in step 8 of a steady 16-step job of ~42 ms iterations: that
    one gap is less than an iteration (``stall_min_share``), yet removing it saves
    over ``warning_cost`` of the run; the gate let it through to the jitter finding."""
    clean = _run(tmp_path, JOB.replace(seed=1), "clean")
    stalled = _run(tmp_path, JOB.replace(seed=1, stalls=((1, 8, 40.0),)), "stalled")
    without, _ = _iteration_ms(clean)
    mean, longest = _iteration_ms(stalled)
    cost = (mean - without) / mean
    assert 0.05 < cost < 0.08, f"the stall costs {cost:.1%}: not the case this test is about"
    assert longest < 2 * mean, f"a step of {longest:.1f} ms is no short stall"
    analysis = analyze(stalled, Thresholds())
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (1,)), found
    assert first.evidence["steps"] == [8], found
    assert first.severity == Severity.WARNING, found
    assert first.cost == pytest.approx(cost, abs=0.01), f"measured {cost:.1%}: {found}"
    assert not [f for f in analysis.findings if f.mode == "sync_amplification"], found


def test_a_stall_in_a_steady_job_stays_a_stall(tmp_path) -> None:
    """Rank 1's step 8 five times as long in a job without the heavy tail: the other
    steps are steady, removing that one step is reported, so it is a one-off stall."""
    sc = JOB.replace(seed=1, slow_spans=((1, 5.0, 8, 9),))
    analysis = analyze(_run(tmp_path, sc, "stall"), Thresholds())
    found = [(f.mode, f.severity.name, f.ranks) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (1,)), found
    assert first.evidence["steps"] == [8], found
    assert first.severity >= Severity.WARNING, found


def test_a_stall_far_beyond_the_jitters_tail_stays_a_stall(tmp_path) -> None:
    """The same heavy-tailed jitter, and rank 1 stopped for 30 steps' compute in step 8:
    no tail reaches that far (``stall_tail_factor`` times the longest other excess), so
    it is named as the stall it is, at its rank and step."""
    sc = JOB.replace(seed=1, tail=(2.5, 0.4), slow_spans=((1, 30.0, 8, 9),))
    path = _run(tmp_path, sc, "both")
    analysis = analyze(path, Thresholds())
    found = [(f.mode, f.severity.name, f.ranks) for f in analysis.findings]
    stalls = [f for f in analysis.findings if f.mode == "stall"]
    assert stalls, found
    assert stalls[0].ranks == (1,) and 8 in stalls[0].evidence["steps"], found
    _, longest = _iteration_ms(path)
    assert longest > 1000, f"the stall's step took {longest:.0f} ms"  # 30 x 40 ms
    assert np.isfinite(stalls[0].cost)


def test_the_two_longest_draws_of_a_heavy_tail_on_two_ranks_are_jitter(tmp_path) -> None:
    """Three ranks, Lomax jitter of shape 3 on every step: seed 126 draws the two longest
    extra forwards on different ranks in different steps, each over five times the third
    longest. Measured against the rest of the steps alone, each looks like a stall; read
    together they are the one tail's two longest draws, and a report naming "a one-off
    stall of ranks 0 and 1" sends its reader after two events that never happened."""
    sc = JOB.replace(name="jitter_tail3", gpus_per_node=3, seed=126, tail=(3.0, 0.4))
    draws = np.random.default_rng([sc.seed, 1]).pareto(3.0, (sc.steps, 3))[1:] * 0.4
    order = np.argsort(draws, axis=None)[::-1]
    (s1, r1), (s2, r2) = (np.unravel_index(i, draws.shape) for i in order[:2])
    longest = draws.ravel()[order]
    assert s1 != s2 and r1 != r2, "the two longest draws share a rank or a step"
    assert longest[1] > 5 * longest[2], f"the draws {longest[:3]} are not the case"

    without, _ = _iteration_ms(_run(tmp_path, sc.replace(tail=None), "clean"))
    jittery = _run(tmp_path, sc, "jittery")
    mean, _ = _iteration_ms(jittery)
    cost = (mean - without) / mean
    analysis = analyze(jittery, Thresholds())
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    assert analysis.findings[0].mode == "sync_amplification", found
    assert not [f for f in analysis.findings if f.mode == "stall"], found
    first = analysis.findings[0]
    assert first.cost == pytest.approx(cost, abs=0.03), f"measured {cost:.1%}: {found}"


def test_two_stalls_of_very_different_length_are_not_one_tail(tmp_path) -> None:
    """The same jitter, and rank 2 stopped for 20 steps' compute in step 5: its gap
    stands far beyond the tail's longest draws, so it is a stall at its rank and step
    alone, and those draws stay the jitter's."""
    sc = JOB.replace(
        name="jitter_tail3", gpus_per_node=3, seed=126, tail=(3.0, 0.4), stalls=((2, 5, 800.0),)
    )
    without, _ = _iteration_ms(_run(tmp_path, sc.replace(stalls=()), "jittery"))
    both = _run(tmp_path, sc, "both")
    mean, _ = _iteration_ms(both)
    cost = (mean - without) / mean
    analysis = analyze(both, Thresholds())
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks, first.evidence["steps"]) == ("stall", (2,), [5]), found
    assert first.cost == pytest.approx(cost, abs=0.03), f"measured {cost:.1%}: {found}"


def test_a_one_step_stall_among_varying_steps_is_certain_by_one_steps_variation(
    tmp_path,
) -> None:
    """Rank 1 stopped 60 ms in step 8 of a job whose steps vary by a few ms: removing
    it saves about 7 %, and what that saving can be off by is the variation of the one
    step it changed over the run's steps, not over their square root (the other steps
    replay as before). Held to the square root, its error hid it below the reporting
    threshold, and the jitter finding took its time as the steps' variation (a
    critical of twice the stall's cost)."""
    sc = JOB.replace(seed=3, jitter=0.08)
    clean = _run(tmp_path, sc, "clean")
    stalled = _run(tmp_path, sc.replace(stalls=((1, 8, 60.0),)), "stalled")
    without, _ = _iteration_ms(clean)
    mean, _ = _iteration_ms(stalled)
    cost = (mean - without) / mean
    assert 0.06 < cost < 0.09, f"the stall costs {cost:.1%}: not the case this test is about"
    analysis = analyze(stalled, Thresholds())
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    stall = next((f for f in analysis.findings if f.mode == "stall"), None)
    assert stall is not None, found
    assert stall.ranks == (1,) and stall.evidence["steps"] == [8], found
    assert stall.severity == Severity.WARNING, found
    assert stall.cost == pytest.approx(cost, abs=0.01), f"measured {cost:.1%}: {found}"
    # the stall is not the steps' variation too
    assert not [f for f in analysis.findings if f.mode == "sync_amplification"], found


def _paused(tmp_path: Path, sc: Planted, pauses: tuple[tuple[int, int, float], ...]):
    """The job with ``pauses`` (rank, step, ms) analysed, and their cost measured
    against the same job run without them."""
    without, _ = _iteration_ms(_run(tmp_path, sc, "clean"))
    paused = _run(tmp_path, sc.replace(stalls=pauses), "paused")
    mean, _ = _iteration_ms(paused)
    return analyze(paused, Thresholds()), (mean - without) / mean


@pytest.mark.parametrize("seed", [2, 3])
def test_a_pause_on_one_rank_every_few_steps_is_a_recurring_stall(tmp_path, seed) -> None:
    """Rank 1 stops for 150 ms every 4 steps (a checkpoint or log flush of its own) in a
    job whose steps vary by a few percent: four long steps, too many for one-off events
    by count, but all on one rank and alike, far beyond every other step. They are
    stalls at that rank, every 4 steps, costed against the same job without them, not
    jitter of every rank (which the pauses read as before: "pin CPU threads")."""
    pauses = tuple((1, s, 150.0) for s in (3, 7, 11, 15))
    analysis, cost = _paused(tmp_path, JOB.replace(seed=seed, jitter=0.03), pauses)
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (1,)), found
    assert first.evidence["steps"] == [3, 7, 11, 15], found
    assert first.evidence["every_steps"] == 4
    assert "(every 4 steps)" in first.summary
    assert "every 4 steps" in first.actions[0]
    assert first.cost == pytest.approx(cost, abs=0.02), f"measured {cost:.1%}: {found}"
    assert "sync_amplification" not in {f.mode for f in analysis.findings}, found


def test_a_pause_of_every_rank_at_once_every_few_steps_is_a_recurring_stall(tmp_path) -> None:
    """Every rank stops for 150 ms in the same steps, every 4 steps (a synchronous
    checkpoint): nobody waits for anybody, so it is no jitter amplified by the
    synchronisation, but a stall of every rank at once, costed against the job
    without it."""
    pauses = tuple((r, s, 150.0) for s in (3, 7, 11, 15) for r in (0, 1))
    analysis, cost = _paused(tmp_path, JOB.replace(seed=2, jitter=0.03), pauses)
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (0, 1)), found
    assert first.evidence["every_steps"] == 4
    assert "every rank stopped" in first.summary and "at once" in first.summary
    assert "every rank waits for" in first.actions[0]
    assert first.cost == pytest.approx(cost, abs=0.02), f"measured {cost:.1%}: {found}"
    assert "sync_amplification" not in {f.mode for f in analysis.findings}, found


def test_pauses_on_one_rank_at_no_interval_are_stalls_listed_by_step(tmp_path) -> None:
    """Rank 1 stops for 150 ms in steps 2, 5, 11 and 14 (a data loader refilling now
    and then): stalls of rank 1 in those steps, with no period claimed, and advice that
    names them all rather than the first alone."""
    pauses = tuple((1, s, 150.0) for s in (2, 5, 11, 14))
    analysis, cost = _paused(tmp_path, JOB.replace(seed=3, jitter=0.03), pauses)
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (1,)), found
    assert first.evidence["steps"] == [2, 5, 11, 14] and first.evidence["every_steps"] is None
    assert "stopped for up to" in first.summary and "steps)" not in first.summary
    assert first.actions[0].startswith("Look at what ran on rank 1 in steps 2, 5, 11, 14:")
    assert first.cost == pytest.approx(cost, abs=0.02), f"measured {cost:.1%}: {found}"


@pytest.mark.parametrize("ranks", [(1,), (0, 1)])
def test_pauses_shorter_than_an_iteration_every_few_steps_are_stalls(tmp_path, ranks) -> None:
    """A pause of half a step every 4 steps, on one rank or on every rank at once: each
    below a one-off stall's bar of an iteration, but a group of long gaps standing
    apart from every other, on one rank or all at once: stalls, not jitter (every rank
    pausing together was read as sync amplification or as healthy)."""
    pauses = tuple((r, s, 20.0) for s in (3, 7, 11, 15) for r in ranks)
    analysis, cost = _paused(tmp_path, JOB.replace(seed=2, jitter=0.02), pauses)
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", ranks), found
    assert first.evidence["every_steps"] == 4
    assert first.cost == pytest.approx(cost, abs=0.02), f"measured {cost:.1%}: {found}"
    assert "sync_amplification" not in {f.mode for f in analysis.findings}, found


def _gaps(world: int, steps: int, long: dict[tuple[int, int], float]):
    """A program's step and rank columns (one gap per rank and step) and their excess in
    ms: 1 ms everywhere but the ``long`` (rank, step) gaps."""
    step = np.repeat(np.arange(steps), world)
    rank = np.tile(np.arange(world), steps)
    excess = np.ones(len(step))
    for (r, s), value in long.items():
        excess[(rank == r) & (step == s)] = value
    return SimpleNamespace(step=step, rank=rank), excess


@pytest.mark.parametrize(
    ("long", "apart"),
    [
        # below a stall, one step of one rank alone: what any tail draws, not an event
        ({(0, 5): 900.0, (1, 12): 60.0}, [5]),
        # two steps of that rank: a group on one rank
        ({(0, 5): 900.0, (1, 12): 60.0, (1, 15): 55.0}, [5, 12, 15]),
        # one step of every rank at once: a coincidence no independent tail makes
        ({(0, 5): 900.0, (0, 12): 60.0, (1, 12): 58.0}, [5, 12]),
        # four steps of one rank, 4.4 times the next gap (another rank's): as unlikely
        # of a tail as one step 5 times beyond the next (5 ** (1 / 4) = 1.5)
        ({(1, 3): 40.0, (1, 7): 40.0, (1, 11): 39.0, (1, 15): 39.0, (0, 2): 9.0}, [3, 7, 11, 15]),
        # the same lengths falling on both ranks in turn: a tail's draws
        ({(0, 3): 40.0, (1, 7): 40.0, (0, 11): 39.0, (1, 15): 39.0, (0, 2): 9.0}, []),
    ],
)
def test_a_group_below_the_steps_standing_apart_holds_two_steps_or_every_rank(long, apart):
    prog, excess = _gaps(2, 20, long)
    big = excess >= 3.0
    events, rest = _standing_apart(prog, big, excess, Thresholds().stall_tail_factor)
    assert events == apart
    assert sorted(events + rest) == sorted({s for _, s in long})


def test_a_pause_every_few_steps_beside_a_lesser_long_step_is_still_a_stall(tmp_path) -> None:
    """Rank 1 stops for 40 ms every 4 steps; rank 0 once for 9 ms, itself beyond the bar
    of a long gap. The pauses stand 4.4 times beyond that step, not 5: one at a time no
    more than a tail's longest draws could, but four of them on one rank at once far
    beyond (the group's factor is the size-th root). They read as jitter amplified by
    the synchronisation before."""
    pauses = ((0, 2, 9.0), *((1, s, 40.0) for s in (3, 7, 11, 15)))
    analysis, cost = _paused(tmp_path, JOB.replace(seed=2, jitter=0.02), pauses)
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (1,)), found
    assert first.evidence["steps"] == [3, 7, 11, 15] and first.evidence["every_steps"] == 4
    assert first.cost == pytest.approx(cost, abs=0.02), f"measured {cost:.1%}: {found}"


@pytest.mark.parametrize("seed", [2, 3])
def test_a_pause_every_third_step_is_judged_against_the_steps_without_it(tmp_path, seed) -> None:
    """Rank 1 stops 20 ms every third step: five steps of sixteen, so in the robust
    spread of all of its steps the median deviation is near the three-quarter point of
    the others', and the pauses fell under ten spreads: jitter amplified by the
    synchronisation, costed about 3 points above what they cost. Against the spread
    of the steps under the warning bar they are a recurring stall."""
    pauses = tuple((1, s, 20.0) for s in (2, 5, 8, 11, 14))
    analysis, cost = _paused(tmp_path, JOB.replace(seed=seed, jitter=0.03), pauses)
    found = [(f.mode, f.severity.name, f.ranks, round(f.cost, 3)) for f in analysis.findings]
    first = analysis.findings[0]
    assert (first.mode, first.ranks) == ("stall", (1,)), found
    assert first.evidence["steps"] == [2, 5, 8, 11, 14] and first.evidence["every_steps"] == 3
    assert first.cost == pytest.approx(cost, abs=0.02), f"measured {cost:.1%}: {found}"
