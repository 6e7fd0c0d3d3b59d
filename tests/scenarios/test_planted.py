"""The planted-cause suite, CI short form: one real 4-rank gloo job on localhost, traced
with no code change, runs clean and planted phases (a straggler, a one-off stall,
unbucketed small all-reduces, many and a few, buckets issued after backward,
heavy-tailed jitter)
between clean ones. Each phase's trace is diagnosed on its own.

A shared 2-core machine has jitter of its own: under load its clean phases lose ~10 %
of each iteration to it, and a rule that judged every phase on its own would then see
"sync amplification" everywhere. So each planted phase is judged against the clean
phases of the same run, measured side by side (:func:`suite.measure_noise`): its
planted cause must come first among the causes the clean phases do not also show, its
replayed saving must stand well above what the same counterfactual saves in the clean
phases, and it must name the planted rank. The clean phases must find nothing but the
machine's jitter. The straggler phase's counterfactual (the slow rank computing like
the others) is checked against the clean phases right before and after it. Every
failure message says what was measured. The full form (every scenario twice,
localhost and the fabric, counterfactuals against real reruns) is
``benchmarks/scenarios.py``.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

from syncpace.analysis import analyze  # noqa: E402

pytestmark = pytest.mark.multirank

BASE = ("--comm", "ddp", "--compute-ms", "30", "--bwd-ms", "30", "--buckets", "8")
BASE += ("--bucket-bytes", str(256 * 1024))
CLEAN = suite.CLEAN
#: (phase, steps, plants, expected first mode or CLEAN, expected ranks)
PHASES = [
    ("warm-up", 6, {}, None, None),  # DDP rebuilds its buckets, clocks settle: not judged
    ("healthy", 16, {}, CLEAN, None),
    ("straggler", 16, {"slow_ranks": "2", "slow_ms": 30}, "straggler", (2,)),
    ("healthy-after", 16, {}, CLEAN, None),  # the rerun without the straggler
    ("stall", 16, {"stall_step": 8, "stall_rank": 1, "stall_ms": 1500}, "stall", (1,)),
    ("latency-bound", 12, {"small": 60}, "latency_bound", None),
    # fewer than latency_min_per_step: named by what bucketing them saves in the replay
    ("latency-few", 12, {"small": 16}, "latency_bound", None),
    ("poor-overlap", 16, {"overlap": "poor", "bwd_ms": 90}, "poor_overlap", None),
    ("jitter", 24, {"jitter": "pareto:1.6:0.2"}, "sync_amplification", None),
    ("healthy-end", 16, {}, CLEAN, None),  # the machine's noise at the end of the run
]


@pytest.fixture(scope="module")
def analyses(tmp_path_factory) -> dict:
    plan = tuple((name, n, plants) for name, n, plants, _, _ in PHASES)
    sc = suite.Scenario(name="short", plant="phases", job=BASE, plan=plan, timeout_s=180)
    load = os.getloadavg()[0]
    run_dir = suite.run_scenario(sc, tmp_path_factory.mktemp("planted") / "run")
    traces = suite.phase_traces(run_dir, [n for _, n, _, _, _ in PHASES])
    result = {name: analyze(t) for t, (name, *_) in zip(traces, PHASES, strict=True)}
    result["_load"] = max(load, os.getloadavg()[0])  # type: ignore[assignment]
    return result


@pytest.fixture(scope="module")
def noise(analyses) -> suite.Noise:
    clean = [analyses[name] for name, *_, expected, _ in PHASES if expected == CLEAN]
    return suite.measure_noise(clean, load=analyses["_load"])


def test_the_clean_phases_find_nothing_but_the_machines_jitter(analyses, noise) -> None:
    for name, *_, expected, _ in PHASES:
        if expected != CLEAN:
            continue
        analysis = analyses[name]
        assert analysis.what_if[0] is not None
        assert abs(analysis.what_if[0].replay_error) < 0.01  # the plain replay, real trace
        found = suite.causes_found(analysis)
        others = [c for c in found if c[0] not in suite.MACHINE_NOISE]
        assert not others, f"clean phase {name!r} found {others}; {noise.describe()}"


def test_each_planted_cause_comes_first_above_the_measured_noise(analyses, noise) -> None:
    outcomes, missed = [], []
    for name, _, plants, expected, ranks in PHASES:
        if expected in (None, CLEAN):
            continue
        sc = suite.Scenario(name=name, plant=str(plants), expected=expected, expected_ranks=ranks)
        analysis = analyses[name]
        assert analysis.what_if[0] is not None
        assert abs(analysis.what_if[0].replay_error) < 0.01
        outcome = suite.score_against(sc, analysis, noise)
        outcomes.append(outcome)
        if not outcome.passed:
            missed.append(
                f"{name}: first {outcome.top} {list(outcome.top_ranks)}, planted {expected} "
                f"{list(ranks or [])} saving {outcome.effect:.1%} against noise "
                f"{noise.of(expected):.1%}; causes {outcome.causes}; "
                f"false critical {outcome.false_critical}"
            )
    for o in outcomes:
        print(f"\n{o.scenario}: needs {noise.need(o.planted):.1%}, causes {o.causes}", end="")
    print("\n" + suite.confusion_text(outcomes) + "\n" + noise.describe())
    assert not missed, "; ".join(missed) + f" | {noise.describe()}"


def test_the_straggler_counterfactual_predicts_the_clean_phases(analyses, noise) -> None:
    """Rank 2 computing like the others, in a replay of the straggler phase, against the
    clean phases measured in the same job seconds apart (the reruns without the plant,
    right before and after it among them): the plant must stand well above how much
    they disagree, and the prediction must land at least twice as close to them as the
    planted phase did. Their median and its median deviation: a load that stretches
    one clean phase (103 against 83 and 82 ms once) moves a mean, not a median."""
    slow = analyses["straggler"].runs[0].iteration_ns / 1e6
    predicted = suite.predict(analyses["straggler"], "straggler:2")
    assert predicted is not None
    clean = statistics.median(noise.iteration_ms)
    drift = statistics.median(abs(ms - clean) for ms in noise.iteration_ms)
    said = (
        f"clean {clean:.1f} ms (drift {drift:.1f}); planted {slow:.1f}; "
        f"predicted {predicted:.1f}; {noise.describe()}"
    )
    print("\n" + said)
    # 30 ms a step on rank 2: the plant must show beyond the clean phases' disagreement
    assert slow - clean > max(2 * drift, 0.1 * clean), said
    assert abs(predicted - clean) < 0.5 * (slow - clean), said
