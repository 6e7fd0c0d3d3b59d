"""The verdict never contradicts the replay: every what-if row that removes a cause and
saves (less the replay's error) at least the reporting threshold has a finding of that
cause at the severity the saving maps to or above, and the verdict names it.

The mapping is written out here from the thresholds' two numbers, not taken from the
code under test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planted import SCENARIOS, Planted, generate
from syncpace.analysis import Analysis, Finding, Role, Severity, Thresholds, analyze, modes
from syncpace.analysis.detectors import DETECTORS, Context
from syncpace.analysis.replay import counterfactuals as cf
from syncpace.report.verdict import build_verdict

DATA = Path(__file__).resolve().parents[1] / "data"
SAVED = sorted(p for p in DATA.iterdir() if p.is_dir() and any(p.glob("rank-*.meta.json"))) + [
    DATA / "demo" / "trace"
]


def expected_severity(saving: float, error: float, th: Thresholds) -> Severity | None:
    """What a replayed saving must be reported at: None below the reporting threshold."""
    floor = saving - error
    if floor >= th.critical_cost:
        return Severity.CRITICAL
    if floor >= th.warning_cost:
        return Severity.WARNING
    return None


def check_floor(analysis: Analysis, th: Thresholds) -> int:
    """Asserts the floor on every run of ``analysis``; returns how many rows it held."""
    verdict = build_verdict(analysis)
    named = {c.mode for c in (*verdict.causes, *verdict.also)}
    held = 0
    for table in analysis.what_if:
        if table is None:
            continue
        found = [f for f in analysis.findings if f.run == table.run]
        for row in table.rows:
            if not row.cause or not modes.has_role(row.cause, Role.CAUSE):
                continue
            need = expected_severity(row.saving, row.error, th)
            if need is None:
                continue
            held += 1
            mine = [f for f in found if f.mode == row.cause]
            what = f"{table.run}: {row.description} saves {row.saving:.1%} ± {row.error:.1%}"
            assert mine, f"{what}, yet no {row.cause} finding: {_modes(found)}"
            assert not verdict.healthy, f"{what}, yet the verdict says {verdict.headline!r}"
            if any(f.symptom for f in mine):
                continue  # overlap seen as a symptom of a network cause the verdict names
            assert max(f.severity for f in mine) >= need, f"{what}: {_modes(found)}"
            assert row.cause in named, f"{what}; the verdict names {sorted(named)}"
    return held


def _modes(findings: list[Finding]) -> list[tuple[str, str, float]]:
    return [(f.mode, str(f.severity), round(f.cost, 4)) for f in findings]


@pytest.mark.parametrize("run", SAVED, ids=lambda p: p.name)
def test_saved_traces_report_every_cause_the_replay_costs(run: Path) -> None:
    th = Thresholds()
    check_floor(analyze(run), th)


def _draw(seed: int) -> Planted:
    """A planted run drawn at random: jitter from barely measurable to dominant, maybe
    a slow rank, overlap or not, cross-node transfers maybe inflated."""
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(1, 3))
    gpus = int(rng.integers(2, 5))
    slow = ((int(rng.integers(0, nodes * gpus)), float(rng.uniform(1.02, 1.2))),)
    hi = float(rng.uniform(1.0, 2.5))
    return SCENARIOS["healthy"].replace(
        name=f"draw{seed}",
        seed=seed,
        nodes=nodes,
        gpus_per_node=gpus,
        jitter=float(rng.uniform(0.005, 0.1)),
        slow_ranks=slow if rng.random() < 0.4 else (),
        overlap=bool(rng.random() < 0.6),
        buckets=int(rng.integers(1, 6)),
        cross_inflation=(1.0, hi) if nodes > 1 and rng.random() < 0.5 else (1.0, 1.0),
        steps=20,
    )


@pytest.mark.parametrize("seed", range(8))
def test_random_draws_report_every_cause_the_replay_costs(tmp_path: Path, seed: int) -> None:
    th = Thresholds()
    check_floor(analyze(generate(_draw(seed), tmp_path / "run")), th)


def test_jitter_costing_most_of_a_tenth_is_named_not_healthy(tmp_path: Path) -> None:
    """A job whose ranks' compute varies by 7 % per phase loses most of a tenth of each
    iteration waiting for the last of them: the replay says so, and so must the verdict
    (it said "No scaling problem found" while removing the jitter saved 9.4 %)."""
    run = generate(SCENARIOS["healthy"].replace(name="jitter", jitter=0.07, seed=3), tmp_path)
    th = Thresholds()
    analysis = analyze(run)
    (table,) = analysis.what_if
    assert table is not None
    row = table.row("jitter")
    assert row is not None and row.cause == "sync_amplification"
    # the regime of the report: above the warning threshold, below the detector's old gate
    assert th.warning_cost <= row.saving - row.error and row.saving < th.sync_wait_share
    top = analysis.findings[0]
    assert top.mode == "sync_amplification" and top.severity == Severity.WARNING
    assert top.cost == pytest.approx(row.saving) and top.cost_basis == "replay"
    verdict = build_verdict(analysis)
    assert verdict.causes[0].mode == "sync_amplification"
    assert verdict.headline == "One cause costs most"
    assert check_floor(analysis, th) == 1


def test_a_cause_its_detector_did_not_name_is_found_from_its_replay() -> None:
    """A detector that replays its cause and then declines (its own test not met)
    leaves the cause to the floor: a finding from the row, at the severity its saving
    maps to, named by the verdict."""
    th = Thresholds()

    def declines(ctx: Context) -> list[Finding]:
        ctx.counterfactual(
            "jitter", "no compute jitter", cf.without_jitter, cause="sync_amplification"
        )
        return []

    quiet = tuple(d for d in DETECTORS if d.__name__ != "sync_amplification")
    run = DATA / "straggler"
    plain = analyze(run, th, detectors=quiet)
    assert "sync_amplification" not in {f.mode for f in plain.findings}
    row = next(r for r in plain.what_if[0].rows if r.name == "jitter")
    # a threshold the straggler fixture's own jitter reaches: the floor must then fire
    low = Thresholds(warning_cost=max(0.0, (row.saving - row.error) / 2))
    analysis = analyze(run, low, detectors=(*quiet, declines))
    (found,) = [f for f in analysis.findings if f.mode == "sync_amplification"]
    assert found.severity == Severity.WARNING
    assert found.cost == pytest.approx(row.saving, abs=1e-4) and found.cost_basis == "replay"
    assert found.evidence["counterfactual"]["name"] == "jitter"
    assert found.actions and "jitter" in found.actions[0]
    assert check_floor(analysis, low) >= 1
