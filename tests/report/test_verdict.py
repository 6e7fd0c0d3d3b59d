"""The verdict: the causes that cost most, who (ranks with host and local rank, links),
how sure, what to do first, and whether the data can be trusted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from syncpace.analysis import analyze
from syncpace.report.merge import merge_findings
from syncpace.report.verdict import build_verdict

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = [DATA / "demo" / "trace", DATA / "demo" / "trace-paced"]
PLANTED_RANK = 2  # tests/data/make_demo.py: the demo's straggler


def _meta(run: Path, rank: int) -> dict:
    return json.loads((run / f"rank-{rank:05d}.meta.json").read_text())


@pytest.fixture(scope="module")
def demo():
    return analyze(DEMO)


def test_demo_verdict_names_the_straggler_and_the_contended_uplink(demo, uplink_truth):
    v = build_verdict(demo)
    stated = {c.mode: c for c in (*v.causes, *v.also)}
    meta = _meta(DEMO[0], PLANTED_RANK)
    who = f"rank {PLANTED_RANK} ({meta['host']}, local rank {meta['local_rank']})"
    assert stated["straggler"].where == who
    contention = stated["fabric_contention"]
    truth = uplink_truth(DEMO[0])
    assert max(truth.values()) > 0.9  # the greedy flows filled an uplink
    assert contention.links and contention.links[0].kind == "uplink"
    for direction, util in truth.items():
        named = f"uplink {direction}" in contention.where
        assert named == (util >= 0.5), (direction, util, contention.where)
    # the headline causes are the costliest: by each finding's cost field
    costs = [max(f.cost for f in demo.findings if f.mode == c.mode) for c in v.causes]
    rest = [max(f.cost for f in demo.findings if f.mode == c.mode) for c in v.also]
    assert costs == sorted(costs, reverse=True) and min(costs) >= max(rest, default=0)
    assert len(v.causes) == 2 and "comm_dominated" not in stated  # a symptom, not a cause
    assert v.first_action == next(f for f in demo.findings if f.mode == v.causes[0].mode).actions[0]
    assert v.quality == ()  # a clean trace: nothing to warn about
    uncertainty = max(_meta(run, r)["clock"]["uncertainty_ns"] for run in DEMO for r in (1, 2, 3))
    assert f"clocks aligned within ±{uncertainty / 1e3:.3g} µs" in v.trust


def test_verdict_of_one_run_names_the_rank_and_its_host():
    v = build_verdict(analyze(DATA / "straggler"))
    meta = _meta(DATA / "straggler", 5)  # the scenario's slow rank (docs/analysis.md)
    assert v.causes[0].mode == "straggler" and v.also == ()
    assert v.causes[0].where == f"rank 5 ({meta['host']}, local rank {meta['local_rank']})"
    assert v.causes[0].cost.endswith("of each iteration")
    assert v.headline == "One cause costs most"


def test_a_run_without_a_cause_but_with_lost_ranks_is_not_called_healthy(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "healthy", run)
    for path in run.glob("rank-00006.*"):
        path.unlink()
    v = build_verdict(analyze(run))
    assert v.healthy  # no cause ...
    assert v.headline.startswith("No cause found in what was traced")  # ... but not healthy
    assert any("ranks have no trace" in q for q in v.quality)


def test_healthy_run_has_no_cause():
    v = build_verdict(analyze(DATA / "healthy"))
    assert v.healthy and v.headline == "No scaling problem found"
    assert v.first_action.startswith("Nothing to fix")


def test_data_quality_warnings_come_with_the_verdict(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "straggler", run)
    for path in run.glob("rank-00007.*"):
        path.unlink()
    meta = json.loads((run / "rank-00003.meta.json").read_text())
    meta["dropped_events"] = 120
    (run / "rank-00003.meta.json").write_text(json.dumps(meta))
    v = build_verdict(analyze(run))
    text = " | ".join(v.quality)
    assert v.headline != "No scaling problem found"
    assert "1 of 8 ranks have no trace" in text
    assert "rank 3 dropped 120 events" in text
    assert v.trust.startswith("7 of 8 ranks traced")


def test_findings_merge_into_one_entry_per_cause_with_each_runs_value(demo):
    merged = merge_findings(demo)
    modes = [m.mode for m in merged]
    assert len(modes) == len(set(modes))
    assert {f.mode for f in demo.findings} == set(modes)
    for m in merged:
        for run, f in m.per_run:
            expected = [x for x in demo.findings if x.mode == m.mode and x.run == run]
            assert (f is None) == (not expected)
            if f is not None:
                assert f == expected[0]
