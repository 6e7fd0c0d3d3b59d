"""The drawn scenarios: the draw from its seed, the sets, the scores on records whose
figures are worked out by hand, resuming and rescoring; and one real localhost draw
run, diagnosed, scored and rescored (slow)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import drawrun  # noqa: E402
import draws  # noqa: E402
import drawscore  # noqa: E402
import suite  # noqa: E402

# The draw ------------------------------------------------------------------------------


def test_a_seed_always_gives_the_same_draw_and_seeds_differ() -> None:
    for seed in (0, 7, 1003):
        assert draws.draw(seed) == draws.draw(seed)
        assert draws.draw(seed, "fabric") == draws.draw(seed, "fabric")
    local = {json.dumps(draws.draw(s).to_json(), sort_keys=True) for s in range(40)}
    assert len(local) == 40
    assert draws.draw(3).to_json() != draws.draw(3, "fabric").to_json()


def test_the_sets_split_by_seed() -> None:
    assert draws.seeds("dev", 3) == [0, 1, 2]
    assert draws.seeds("test", 3, start=5) == [1005, 1006, 1007]
    assert draws.draw(999).split == "dev"
    assert draws.draw(1000).split == "test"
    with pytest.raises(ValueError, match="1000 seeds"):
        draws.seeds("dev", 10, start=995)
    with pytest.raises(ValueError, match="local or fabric"):
        draws.draw(1, "cloud")


def test_the_draws_cover_the_ranges_asked_for() -> None:
    local = [draws.draw(s) for s in range(400)]
    fabric = [draws.draw(s, "fabric") for s in range(400)]
    assert {d.ranks for d in local} == {2, 3, 4, 5, 6}
    assert {d.hosts for d in fabric} == {2, 3, 4}
    assert max(d.ranks for d in fabric) <= 6
    assert {d.fabric["topology"] for d in fabric} == {"star", "leaf-spine"}
    assert {d.job["comm"] for d in local} == {"ddp", "sync", "async"}
    healthy = sum(d.healthy for d in local) / len(local)
    assert 0.15 < healthy < 0.25, healthy
    # the CPU-contended ones are healthy localhost draws, and a fair share of them
    contended = [d for d in local if d.contended]
    assert (
        all(d.healthy for d in contended)
        and 0.3 < len(contended) / sum(d.healthy for d in local) < 0.7
    )
    kinds = Counter(c.kind for d in local + fabric for c in d.causes)
    assert set(kinds) == set(draws.FABRIC_KINDS)
    assert not {c.kind for d in local for c in d.causes} - set(draws.LOCAL_KINDS)
    two = sum(len(d.causes) == 2 for d in local + fabric)
    assert 0.08 < two / len(local + fabric) < 0.25, two
    strengths = [c.strength for d in local for c in d.causes]
    assert min(strengths) < 0.05 and max(strengths) > 0.95


def test_a_kind_added_later_joins_only_the_seeds_drawn_after_it() -> None:
    """A pause every few steps (a checkpoint or log flush, of one rank or of every rank)
    joined the generator after sets were scored: the seeds below its first development
    and test seeds draw what they always drew; from them on some draws plant it."""
    dev, test = draws.LATER_KINDS["pause"]
    for seed in (dev - 1, draws.TEST_FROM, test - 1):
        assert "pause" not in draws.kinds_of(seed, "local")
        assert "pause" not in draws.kinds_of(seed, "fabric")
    for seed in (dev, draws.TEST_FROM - 1, test):
        assert draws.kinds_of(seed, "local")[-1] == "pause"
    assert not any(c.kind == "pause" for s in range(dev) for c in draws.draw(s).causes)
    later = [c for s in range(dev, dev + 60) for c in draws.draw(s).causes if c.kind == "pause"]
    assert later and draws.MODE["pause"] == "stall"
    alone = [c for c in later if c.plants["pause_rank"] >= 0]
    together = [c for c in later if c.plants["pause_rank"] < 0]
    assert alone and together
    assert all(c.ranks == (c.plants["pause_rank"],) for c in alone)
    assert all(3 <= c.plants["pause_every"] <= 5 for c in later)


def test_a_pause_is_planted_every_few_steps_on_its_rank() -> None:
    """The job's plant of a pause: its milliseconds on its rank (or every rank) in
    every ``pause_every``-th step of a phase, nothing in the others."""
    import job
    import numpy as np

    rng = np.random.default_rng(0)
    pause = ["--compute-ms", "10", "--pause-every", "4", "--pause-ms", "50"]
    one = job.parse([*pause, "--pause-rank", "1"])
    every = job.parse([*pause, "--pause-rank", "-1"])
    paused = [s for s in range(16) if job.planted_ms(one, 1, rng, s) > 0]
    assert paused == [3, 7, 11, 15]
    assert all(job.planted_ms(one, 0, rng, s) == 0 for s in range(16))
    assert [s for s in range(16) if job.planted_ms(every, 0, rng, s) == 50.0] == paused


def test_strength_runs_from_barely_measurable_to_dominant() -> None:
    import numpy as np

    d = draws.draw(8)  # a straggler draw, its job kept
    state = {"job": d.job, "ranks": d.ranks, "hosts": 1, "fabric": None, "steps": 16}
    step = d.job["compute_ms"] + d.job["bwd_ms"]
    weak, _ = draws._plant(np.random.default_rng(1), "straggler", state, 0.0)
    strong, _ = draws._plant(np.random.default_rng(1), "straggler", state, 1.0)
    assert weak.plants["slow_ms"] == pytest.approx(0.02 * step, abs=0.06)
    assert strong.plants["slow_ms"] == pytest.approx(step, abs=0.06)


def test_a_fabric_plant_names_its_link_and_host() -> None:
    import numpy as np

    spine = {"topology": "leaf-spine", "leaves": 2, "hosts": 2, "host_rate": "200mbit"}
    state = {"job": draws.draw(1).job, "ranks": 4, "hosts": 4, "fabric": spine, "steps": 16}
    for seed in range(10):
        cause, change = draws._plant(np.random.default_rng(seed), "slow_link", state, 1.0)
        link, rate = cause.faults[0].split()[1:]
        host = int(cause.nodes[0][1:])
        assert link == f"h{host}-leaf{host // 2}"
        assert 10 <= int(rate.removesuffix("mbit")) <= 20  # 8 % of 200 Mbit/s at full strength
        assert change["bucket_bytes"] >= 256 * 1024
        starved, _ = draws._plant(
            np.random.default_rng(seed), "cpu_starved", {**state, "ranks": 8}, 0.5
        )
        h = int(starved.nodes[0][1:])
        assert starved.ranks == (2 * h, 2 * h + 1)


def test_a_draw_becomes_a_scenario_of_clean_and_planted_phases() -> None:
    d = next(draws.draw(s) for s in range(100) if len(draws.draw(s).causes) == 2)
    sc = d.scenario()
    kinds = [k for k, _, _ in sc.phases()]
    assert kinds == [
        suite.WARMUP,
        suite.CLEAN,
        suite.PLANTED,
        suite.CLEAN,
        suite.PLANTED,
        suite.CLEAN,
    ]
    planted = [p for k, _, p in sc.phases() if k == suite.PLANTED][0]
    for cause in d.causes:
        assert cause.plants.items() <= planted.items()
    assert {sc.expected, *sc.also} == set(d.label.split("+"))
    argv = suite.job_args(sc)
    assert argv[argv.index("--comm") + 1] == d.job["comm"]
    healthy = next(draws.draw(s) for s in range(100) if draws.draw(s).healthy)
    assert [k for k, _, _ in healthy.scenario().phases()][1:] == [suite.CLEAN] * 4


def test_a_small_calls_rerun_makes_them_as_one_call() -> None:
    """The fix of many small syncs is one coalesced call, not none (their data still has
    to be reduced): the clean phases of a small-calls draw make that call, so the
    measured cost is what coalescing saves."""
    d = next(d for d in map(draws.draw, range(200)) if [c.kind for c in d.causes] == ["small"])
    calls = d.causes[0].plants["small"]
    for kind, _, plants in d.scenario().phases():
        if kind == suite.PLANTED:
            assert plants.get("small") == calls and not plants.get("small_fused")
        else:
            assert plants == {"small_fused": calls}
    healthy = next(d for d in map(draws.draw, range(100)) if d.healthy)
    assert all(not p for _, _, p in healthy.scenario().phases())


def test_each_draw_seeds_its_jobs_own_noise() -> None:
    """A jitter plant's extra compute is drawn in the job, per rank and step: from the
    draw's seed, so two jittery draws do not share their longest steps."""
    np = pytest.importorskip("numpy")
    import job

    jittery = [d for d in map(draws.draw, range(200)) if "jitter" in d.scenario().plants][:2]
    tails = []
    for d in jittery:
        argv = suite.job_args(d.scenario())
        seed = int(argv[argv.index("--seed") + 1])
        assert seed == d.seed
        rng = np.random.default_rng([seed, 1])
        tails.append([job.jitter_draw("pareto:2.5:0.3", rng) for _ in range(16)])
    assert tails[0] != tails[1]


# Scoring records worked out by hand ---------------------------------------------------------


def finding(mode: str, severity: str = "critical", ranks=(), nodes=(), symptom=False) -> dict:  # noqa: ANN001
    return {
        "mode": mode,
        "severity": severity,
        "cost": 0.2,
        "cost_error": 0.01,
        "symptom": symptom,
        "source": [],
        "ranks": list(ranks),
        "nodes": list(nodes),
    }


def phase(index: int, kind: str, ms: float, findings=(), rows=(), predicted=None) -> dict:  # noqa: ANN001
    p = {
        "index": index,
        "kind": kind,
        "iteration_ms": ms,
        "findings": list(findings),
        "what_if": list(rows),
    }
    if kind == suite.PLANTED:
        p["predicted_ms"], p["predicted_by"] = predicted, "straggler:2"
    return p


def straggler_record(seed: int = 5, top_ranks=(2,), planted_ms=(125.0, 104.0)) -> dict:  # noqa: ANN001
    """Rank 2 a straggler: clean phases 100, 100, 96 ms; planted 125 and 104 ms; the
    clean phases report the machine's jitter, which the planted phases report first."""
    cause = draws.Cause("straggler", 0.8, {"slow_ranks": "2", "slow_ms": 25}, ranks=(2,))
    d = draws.Draw(seed, "local", 4, 1, None, draws.draw(1).job, (cause,))
    jitter = finding("sync_amplification", "warning")
    strag = finding("straggler", ranks=top_ranks)
    phases = [
        phase(1, suite.CLEAN, 100.0, [jitter]),
        phase(2, suite.PLANTED, planted_ms[0], [jitter, strag], predicted=101.25),
        phase(3, suite.CLEAN, 100.0, [jitter]),
        phase(4, suite.PLANTED, planted_ms[1], [jitter, strag], predicted=None),
        phase(5, suite.CLEAN, 96.0, []),
    ]
    return {
        "draw": d.to_json(),
        "link": None,
        "runs": [{"run": 1, "run_dir": "x", "phases": phases}],
    }


def test_the_measured_cost_comes_from_the_clean_phases_around_each_planted_one() -> None:
    cases = drawscore.planted_cases(straggler_record())
    assert [c["clean_ms"] for c in cases] == [100.0, 98.0]
    assert cases[0]["measured"] == pytest.approx(0.2)  # (125 - 100) / 125
    assert cases[1]["measured"] == pytest.approx(6 / 104)
    assert [c["drift"] for c in cases] == [0.0, pytest.approx(4 / 104)]
    assert [c["sure"] for c in cases] == [True, False]  # 5.8 % - 3.8 % < 5 %
    assert cases[0]["predicted_saving"] == pytest.approx(0.19)  # (125 - 101.25) / 125
    assert cases[0]["error"] == pytest.approx(-0.01)
    assert cases[1]["error"] is None  # no prediction: not scored
    # the jitter the clean phases show too is passed over; the raw first is kept
    assert [c["top"] for c in cases] == ["straggler", "straggler"]
    assert [c["top_raw"] for c in cases] == ["sync_amplification"] * 2
    assert all(c["first"] and c["named"] and c["above"] for c in cases)


def test_a_cause_at_the_wrong_rank_is_first_but_not_named() -> None:
    s = drawscore.summarize([straggler_record(top_ranks=(1,))])
    assert s["a_first"] == {
        "phases_above": 2,
        "first": 2,
        "named": 0,
        "first_raw": 0,
        # the second (104 ms against 100 and 96) is within how far its reruns disagree
        "phases_sure": 1,
        "sure_first": 1,
        "sure_named": 0,
        "phases_below": 0,
        "below_found": 0,
    }
    assert [m["top_ranks"] for m in s["misses"]] == [[1], [1]]
    assert "wrong place" in drawscore.summary_text(s)


def test_a_plant_measured_below_the_threshold_is_not_a_miss() -> None:
    s = drawscore.summarize([straggler_record(planted_ms=(125.0, 100.0))])
    assert s["a_first"]["phases_above"] == 1 and s["a_first"]["phases_below"] == 1
    assert s["confusion"]["straggler"] == {"straggler": 1}
    assert s["confusion"]["straggler (<5%)"] == {"straggler": 1}


def healthy_record(seed: int, contended: int, found=()) -> dict:  # noqa: ANN001
    d = draws.Draw(seed, "local", 3, 1, None, draws.draw(1).job, (), contended=contended)
    phases = [phase(i, suite.CLEAN, 50.0, found if i == 2 else []) for i in range(1, 5)]
    return {
        "draw": d.to_json(),
        "link": None,
        "runs": [{"run": 1, "run_dir": "x", "phases": phases}],
    }


def test_false_criticals_and_stragglers_on_contended_hosts_are_counted() -> None:
    records = [
        healthy_record(1, 0),
        healthy_record(2, 2, [finding("straggler", "critical", ranks=(0,))]),
        healthy_record(3, 1, [finding("straggler", "warning", ranks=(1,))]),
        healthy_record(4, 1, [finding("comm_dominated", "critical", symptom=True)]),
        healthy_record(5, 0, [finding("poor_overlap", "critical")]),  # the job's own shape
    ]
    s = drawscore.summarize(records)
    c = s["c_false_critical"]
    assert (c["healthy_draws"], c["healthy_draws_critical"]) == (5, 2)
    assert (c["healthy_phases"], c["healthy_phases_critical"]) == (20, 2)
    assert c["modes"] == {"straggler": 1, "poor_overlap": 1}
    shape = c["beyond_shape"]
    assert (shape["healthy_draws_critical"], shape["healthy_phases_critical"]) == (1, 1)
    assert s["contended_healthy"] == {"draws": 3, "name_straggler": 2}
    assert s["confusion"]["healthy"] == {"healthy": 17, "straggler": 2, "poor_overlap": 1}


def test_a_replayed_saving_the_verdict_does_not_report_is_a_contradiction() -> None:
    row = {"name": "overlap", "cause": "poor_overlap", "saving": 0.2, "error": 0.01}
    quiet = {"name": "jitter", "cause": "sync_amplification", "saving": 0.05, "error": 0.02}
    generic = {"name": "links:best", "cause": "", "saving": 0.5, "error": 0.0}
    # 7.31 % less 2.31 % reads 5 % but may be 4.99 % before the file rounded it: not judged
    edge = {"name": "jitter", "cause": "sync_amplification", "saving": 0.0731, "error": 0.0231}
    record = healthy_record(1, 0)
    p = record["runs"][0]["phases"][0]
    p["what_if"] = [row, quiet, generic, edge]
    p["findings"] = [finding("poor_overlap", "warning")]  # 19 % floor: critical needed
    found = drawscore.contradictions(record)
    assert len(found) == 1 and "poor_overlap not reported at critical" in found[0]
    p["findings"] = [finding("poor_overlap", "critical")]
    assert drawscore.contradictions(record) == []
    p["findings"] = [finding("poor_overlap", "warning", symptom=True)]
    assert drawscore.contradictions(record) == []


def test_a_draw_run_twice_is_stable_when_both_runs_name_the_same_cause_and_place() -> None:
    one = straggler_record()
    two = straggler_record()
    assert drawscore.stability(one) is None
    one["runs"].append({**one["runs"][0], "run": 2})
    assert drawscore.stability(one) is True
    moved = straggler_record(top_ranks=(3,))["runs"][0]
    two["runs"].append({**moved, "run": 2})
    assert drawscore.stability(two) is False
    s = drawscore.summarize([one, two])
    assert s["e_stability"] == {"run_twice": 2, "stable": 1, "unstable": ["local-5"]}


def test_errors_by_kind_and_strength() -> None:
    s = drawscore.summarize([straggler_record()])
    assert s["b_error"]["by_kind"]["straggler"]["n"] == 1
    assert s["b_error"]["by_kind"]["straggler"]["median"] == pytest.approx(0.01)
    assert set(s["b_error"]["by_strength"]) == {"strong"}


# Resuming and rescoring ------------------------------------------------------------------


def test_a_set_resumes_where_it_stopped_and_runs_failed_draws_again(tmp_path, monkeypatch) -> None:
    bench = _bench()
    ran: list[str] = []

    def fake_run(d, out, repeat, link, log):  # noqa: ANN001, ANN202
        ran.append(d.name)
        runs = (
            [{"run": 1, "run_dir": "x", "error": "boom"}]
            if d.seed == 1
            else straggler_record(d.seed)["runs"]
        )
        saved = {"draw": d.to_json(), "link": None, "runs": runs}
        drawrun.record_path(out, d).write_text(json.dumps(saved))
        return saved

    monkeypatch.setattr(drawrun, "run_draw", fake_run)
    argv = ["--set", "dev", "--count", "3", "--where", "local", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    assert ran == ["local-0", "local-1", "local-2"]
    assert bench.main(argv) == 0
    assert ran[3:] == ["local-1"]  # only the failed one again
    summary = json.loads((tmp_path / "dev" / "summary.json").read_text())
    assert summary["local"]["draws"] == 3
    assert summary["local"]["failed_runs"] == ["local-1 run 1: boom"]


def _bench():  # noqa: ANN202
    """The benchmark, loaded from its file (its name is the generator's too)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_draws", HERE.parents[1] / "benchmarks" / "draws.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rescoring_diagnoses_the_saved_runs_again_and_runs_nothing(tmp_path, monkeypatch) -> None:
    d = draws.draw(5)
    record = straggler_record(5)
    record["runs"][0]["run_dir"] = str(tmp_path)  # a run directory that is there
    record["runs"].append({"run": 2, "run_dir": str(tmp_path / "gone"), "error": "boom"})
    drawrun.record_path(tmp_path, d).write_text(json.dumps(record))
    seen = []

    def again(d, run_dir, k, link, load=0.0, wall_s=0.0):  # noqa: ANN001, ANN202
        seen.append((d.seed, str(run_dir), k))
        return {"run": k, "run_dir": str(run_dir), "phases": []}

    monkeypatch.setattr(drawrun, "record_of", again)
    monkeypatch.setattr(suite, "run_scenario", lambda *a, **k: pytest.fail("rescoring ran a job"))
    saved = drawrun.rescore(tmp_path, [d, draws.draw(6)])
    assert seen == [(5, str(tmp_path), 1)]
    assert len(saved) == 1  # draw 6 has no file
    written = json.loads(drawrun.record_path(tmp_path, d).read_text())
    assert written["runs"][0]["phases"] == [] and written["runs"][1]["error"] == "boom"


def test_a_damaged_record_is_one_line_naming_the_file(tmp_path, capsys) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "draw-local-0.json").write_text("{not json")
    bench = _bench()
    assert bench.main(["--set", "dev", "--count", "0", "--out", str(tmp_path), "--rescore"]) == 2
    out = capsys.readouterr().out
    assert "draw-local-0.json: not JSON" in out and "Traceback" not in out


# One real draw ------------------------------------------------------------------------------


@pytest.mark.multirank
def test_a_real_straggler_draw_is_run_measured_scored_and_rescored(tmp_path) -> None:
    """Two ranks, rank 1 computing 40 ms more in the planted phases of a 20 ms job:
    the reruns measure its cost, the diagnosis names it first at rank 1, its
    counterfactual lands near the measured cost, and rescoring gives the same."""
    cause = draws.Cause("straggler", 1.0, {"slow_ranks": "1", "slow_ms": 40}, ranks=(1,))
    job = {"comm": "sync", "compute_ms": 20, "bwd_ms": 0.0, "buckets": 2, "bucket_bytes": 64 * 1024}
    d = draws.Draw(7, "local", 2, 1, None, job, (cause,), steps=8)
    record = drawrun.run_draw(d, tmp_path, repeat=1)
    assert drawrun.is_done(tmp_path, d)
    cases = drawscore.planted_cases(record)
    said = json.dumps(cases, default=str)
    assert len(cases) == 2, said
    for c in cases:
        # 40 ms more on a ~25 ms iteration: more than half of the planted one
        assert c["measured"] > 0.4, said
        assert c["first"] and c["named"], said
    # one step held up by the loaded machine stays in a planted phase's replay but not in
    # the clean phases around it: one of the two phases is enough to check the replay
    assert min(abs(c["error"]) for c in cases) < 0.1, said
    before = [[f["mode"] for f in p["findings"]] for p in record["runs"][0]["phases"]]
    again = drawrun.rescore(tmp_path, [d])[0]
    assert [[f["mode"] for f in p["findings"]] for p in again["runs"][0]["phases"]] == before


@pytest.mark.multirank
def test_a_real_heavy_tailed_jitter_draw_with_a_long_step_is_not_read_as_healthy(tmp_path) -> None:
    """Development draw 740: two ranks, Lomax jitter (shape 2.19, scale 0.365 of a 38.2
    ms compute) on every step. The job's draws are seeded by the draw, and its first
    planted phase holds one step of a rank 78 ms longer than its compute, about one and
    a half iterations. Such a phase once read as healthy: the step taken for a one-off
    stall whose saving, and the jitter's without it, each fell under the reporting
    threshold. Whether one step that far out is the jitter's tail or a stall depends on
    how far the machine's load moved the other steps; either way the phase names a
    cause, and the jitter's replay predicts the cost the reruns measure."""
    d = draws.draw(740)
    assert [c.kind for c in d.causes] == ["jitter"] and d.ranks == 2, d.describe()
    record = drawrun.run_draw(d, tmp_path, repeat=1)
    cases = drawscore.planted_cases(record)
    said = json.dumps(cases, default=str)
    assert len(cases) == 2, said
    for c in cases:
        assert c["measured"] > 0.1, said  # the jitter costs 20-40 % of a planted phase
        assert c["top"] in ("sync_amplification", "stall"), said
    # the clean phases around each planted one move with the machine's load by as much
    # as 16 % of it: one of the two phases is enough to check the replay
    assert min(abs(c["error"]) for c in cases) < 0.1, said
    assert cases[0]["first"], said  # the phase holding the longest step


@pytest.mark.slow  # imports torch
def test_a_poor_overlap_issues_async_buckets_only_after_backward(monkeypatch) -> None:
    """job.py's async buckets: during backward's compute, or (planted) all after it."""
    import job

    def events(overlap: str) -> list[str]:
        log: list[str] = []

        class Work:
            def wait(self) -> None:
                log.append("wait")

        monkeypatch.setattr(job.time, "sleep", lambda s: log.append(f"sleep {s * 1e3:.0f}"))
        monkeypatch.setattr(job.dist, "all_reduce", lambda *a, **k: log.append("issue") or Work())
        argv = ["--comm", "async", "--compute-ms", "10", "--bwd-ms", "30", "--buckets", "3"]
        args = job.parse([*argv, "--overlap", overlap])
        job.one_step(args, job.Model(args), 0, None, 0)
        return log

    bucket = ["sleep 10", "issue"]
    assert events("good") == ["sleep 10", *bucket * 3, "wait", "wait", "wait"]
    assert events("poor") == [
        "sleep 10",
        "sleep 30",
        "issue",
        "issue",
        "issue",
        "wait",
        "wait",
        "wait",
    ]
