"""Several runs of different world sizes: a scaling curve, and CV evidence by scale."""

from __future__ import annotations

from pathlib import Path

from planted import SCENARIOS, generate
from syncpace.analysis import analyze


def test_runs_of_growing_size_give_a_scaling_curve(tmp_path: Path) -> None:
    base = SCENARIOS["sync_amplification"].replace(steps=20)
    runs = [generate(base.replace(nodes=n, seed=n), tmp_path / f"n{n}") for n in (1, 2, 4)]
    analysis = analyze(runs)
    assert [p.world_size for p in analysis.scaling] == [4, 8, 16]
    first, *_, last = analysis.scaling
    assert first.strong_speedup == 1.0 and first.weak_efficiency == 1.0
    # weak scaling (same per-rank work): jitter makes the largest run slower per step
    assert last.weak_efficiency < 1.0
    assert last.weak_speedup == last.weak_efficiency * 4
    sync = [f for f in analysis.findings if f.mode == "sync_amplification"]
    assert sync, [f.mode for f in analysis.findings]
    assert set(sync[0].evidence["cv_by_world_size"]) == {4, 8, 16}
    assert {f.run for f in analysis.findings} <= {str(r) for r in runs}
