"""Several runs of different world sizes: a scaling curve, and CV evidence by scale."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

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


DATA = Path(__file__).resolve().parents[1] / "data"


def _mean_iteration_s(run: Path, warmup: int = 1) -> float:
    """The job's mean iteration time from the raw step files: from one iteration
    boundary (the latest end over ranks) to the next; the first kept step from the
    earliest start (docs/analysis.md)."""
    ends: dict[int, int] = {}
    first_start = None
    for path in run.glob("rank-*.steps.arrow"):
        for s in pa.ipc.open_stream(pa.memory_map(str(path))).read_all().to_pylist():
            if s["step"] < warmup:
                continue
            ends[s["step"]] = max(ends.get(s["step"], 0), s["end_ns"])
            if s["step"] == warmup:
                first_start = min(first_start or s["start_ns"], s["start_ns"])
    steps = sorted(ends)
    gaps = [ends[b] - ends[a] for a, b in zip(steps, steps[1:], strict=False)]
    times = [ends[steps[0]] - first_start, *gaps]
    return sum(times) / len(times) / 1e9


def test_runs_of_one_world_size_are_compared_not_scaled() -> None:
    """Traced and paced runs of one job (the demo's): a comparison against the first,
    never a 'scaling curve' at a single world size."""
    runs = [DATA / "demo" / "trace", DATA / "demo" / "trace-paced"]
    analysis = analyze(runs)
    assert analysis.study == "comparison"
    assert analysis.scaling == ()
    base, paced = analysis.comparison
    assert base.baseline is None and base.iteration_change is None
    assert paced.baseline == str(runs[0])
    expected = _mean_iteration_s(runs[1]) / _mean_iteration_s(runs[0]) - 1
    assert paced.iteration_change == pytest.approx(expected, rel=1e-9)
    assert paced.paced_fraction is not None and base.paced_fraction is None
    data = analysis.to_json()["metrics"]
    assert data["study"] == "comparison" and data["scaling"] == []
    assert [c["run"] for c in data["comparison"]] == [str(r) for r in runs]


def test_mixed_world_sizes_scale_over_distinct_sizes(tmp_path: Path) -> None:
    base = SCENARIOS["healthy"].replace(steps=12)
    a = generate(base.replace(nodes=1, seed=1), tmp_path / "a4")
    b = generate(base.replace(nodes=1, seed=2), tmp_path / "b4")
    c = generate(base.replace(nodes=2, seed=3), tmp_path / "c8")
    analysis = analyze([a, b, c])
    assert analysis.study == "scaling"
    assert [(p.run, p.world_size) for p in analysis.scaling] == [(str(a), 4), (str(c), 8)]
    rows = {r.run: r for r in analysis.comparison}
    assert rows[str(b)].baseline == str(a) and rows[str(c)].baseline is None
    assert analyze(a).scaling == () and analyze(a).study == "single"


def test_runs_of_different_jobs_are_side_by_side_not_a_scaling_study(tmp_path: Path) -> None:
    """The demo's 4-rank job (1.2 MB of all-reduce per iteration) and a planted 8-rank
    job (about 100 MB): two models, not one job at two sizes. No curve (it read 'strong
    1258 %'), no baseline across them, and one line saying what they are."""
    other = generate(SCENARIOS["healthy"].replace(nodes=2, steps=12), tmp_path / "other")
    demo = DATA / "demo" / "trace"
    analysis = analyze([demo, other])
    assert analysis.study == "separate" and analysis.scaling == ()
    assert all(c.baseline is None for c in analysis.comparison)
    assert analysis.relation.startswith(
        "2 different jobs (parallelism ddp vs none recognised), not one job at several sizes"
    )
    assert f"{demo}: all_reduce 1.2 MB per iteration" in analysis.relation
    assert f"{other}: all_reduce 105 MB per iteration" in analysis.relation
    data = analysis.to_json()["metrics"]
    assert data["study"] == "separate" and data["scaling"] == []
    assert data["relation"] == analysis.relation
    # the same job at two sizes is still a scaling study
    same = generate(SCENARIOS["healthy"].replace(nodes=1, steps=12), tmp_path / "same")
    assert analyze([same, other]).study == "scaling"


def test_the_same_run_twice_is_refused_in_one_line(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    demo = DATA / "demo" / "trace"
    copy = tmp_path / "copy"
    shutil.copytree(demo, copy)
    for runs in ([demo, demo], [demo, copy]):
        proc = subprocess.run(
            [sys.executable, "-m", "syncpace", "diagnose", *map(str, runs)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (
            f"syncpace diagnose: error: {runs[1]}: the same run as {runs[0]} "
            "(identical files): give each run once\n"
        )
