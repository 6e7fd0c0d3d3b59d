"""The planted-cause suite, CI short form: one real 4-rank gloo job on localhost, traced
with no code change, runs six phases (healthy, a straggler, a one-off stall, unbucketed
small all-reduces, buckets issued after backward, heavy-tailed jitter); each phase's
trace is diagnosed on its own and must put its planted cause first, naming the planted
rank, with no other critical finding. The straggler phase sits between two clean ones:
the replay's counterfactual (the slow rank computing like the others) is checked
against those real phases of the same job without the plant. The full form (every
scenario twice, localhost and the fabric, counterfactuals against real reruns) is
``benchmarks/scenarios.py``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402

from syncpace.analysis import analyze  # noqa: E402

pytestmark = pytest.mark.multirank

BASE = ("--comm", "ddp", "--compute-ms", "30", "--bwd-ms", "30", "--buckets", "4")
BASE += ("--bucket-bytes", str(256 * 1024))
#: How far the two clean phases may differ for them to be a reference.
DRIFT = 0.15
#: (phase, steps, plants, expected first mode, expected ranks)
PHASES = [
    ("warm-up", 6, {}, None, None),  # DDP rebuilds its buckets, clocks settle: not judged
    ("healthy", 16, {}, suite.HEALTHY, None),
    ("straggler", 16, {"slow_ranks": "2", "slow_ms": 15}, "straggler", (2,)),
    ("healthy-after", 16, {}, suite.HEALTHY, None),  # the rerun without the straggler
    ("stall", 16, {"stall_step": 8, "stall_rank": 1, "stall_ms": 1500}, "stall", (1,)),
    ("latency-bound", 12, {"small": 60}, "latency_bound", None),
    ("poor-overlap", 16, {"overlap": "poor", "bwd_ms": 90}, "poor_overlap", None),
    ("jitter", 24, {"jitter": "pareto:1.6"}, "sync_amplification", None),
]


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> list:
    out = tmp_path_factory.mktemp("planted")
    plan = tuple((name, n, plants) for name, n, plants, _, _ in PHASES)
    sc = suite.Scenario(name="short", plant="six phases", job=BASE, plan=plan, timeout_s=150)
    run_dir = suite.run_scenario(sc, out / "run")
    return suite.phase_traces(run_dir, [n for _, n, _, _, _ in PHASES])


@pytest.fixture(scope="module")
def analyses(phases) -> dict:
    return {name: analyze(trace) for trace, (name, *_) in zip(phases, PHASES, strict=True)}


def test_each_planted_cause_comes_first(analyses) -> None:
    outcomes = []
    for name, _, plants, expected, ranks in PHASES:
        if expected is None:
            continue
        sc = suite.Scenario(name=name, plant=str(plants), expected=expected, expected_ranks=ranks)
        analysis = analyses[name]
        outcomes.append(suite.score(sc, analysis))
        assert analysis.what_if[0] is not None
        assert abs(analysis.what_if[0].replay_error) < 0.01  # the plain replay, real trace
    print("\n" + suite.confusion_text(outcomes))
    missed = [(o.scenario, o.top, o.top_ranks, o.false_critical) for o in outcomes if not o.passed]
    assert not missed, missed


def test_the_straggler_counterfactual_predicts_the_clean_phases(analyses) -> None:
    """Rank 2 computing like the others, in a replay of the straggler phase, against the
    measured phases right before and after it (the same job, seconds apart, no plant):
    the prediction must land at least twice as close to them as the planted phase did.
    The clean phases are the reference only when they agree with each other: a shared
    machine's load can move a whole phase by more than the plant."""
    before, after = (analyses[n].runs[0].iteration_ns / 1e6 for n in ("healthy", "healthy-after"))
    slow = analyses["straggler"].runs[0].iteration_ns / 1e6
    predicted = suite.predict(analyses["straggler"], "straggler:2")
    assert predicted is not None
    print(f"\nclean {before:.1f}, {after:.1f} ms; planted {slow:.1f}; predicted {predicted:.1f}")
    if abs(before / after - 1) > DRIFT:
        pytest.skip(f"the clean phases disagree ({before:.1f} vs {after:.1f} ms): no reference")
    clean = statistics.mean((before, after))
    assert slow > clean * 1.1  # the plant did slow the job (15 ms a step on rank 2)
    assert abs(predicted - clean) < 0.5 * abs(slow - clean)
