"""Running drawn scenarios and keeping what each run showed, one JSON file per draw.

:func:`run_draw` runs a :class:`draws.Draw` (``repeat`` times: a draw run twice tells
whether the diagnosis is stable), diagnoses each phase of each run on its own and
writes ``OUT/draw-WHERE-SEED.json``; :func:`record_of` is what that file holds per run:
per phase its mean iteration, its findings, its what-if rows, and for a planted phase
the iteration the replay predicts without the planted cause. The measured cost of the
cause comes from the clean phases around each planted phase, the same job seconds
apart without it (:mod:`drawscore`). A draw whose file exists is done; a draw whose
runs failed is tried again. :func:`rescore` diagnoses the saved run directories again
and rewrites the files, running nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import draws
import suite

from syncpace.analysis import Analysis, Thresholds, analyze

#: A program that keeps one CPU busy until it is stopped: the load of a contended host.
BURNER = "while True:\n    pass\n"
#: The findings' fields a score needs (the evidence, actions and summaries stay out).
KEPT = ("mode", "severity", "cost", "cost_error", "symptom", "source", "ranks", "nodes")
Runner = Callable[[suite.Scenario, Path, Any], Path]


def record_path(out: Path, d: draws.Draw) -> Path:
    return out / f"draw-{d.where}-{d.seed}.json"


def is_done(out: Path, d: draws.Draw) -> bool:
    """Whether the draw's file exists with every run whole (failed runs run again)."""
    path = record_path(out, d)
    if not path.is_file():
        return False
    try:
        saved = json.loads(path.read_text())
    except ValueError:
        return False
    runs = saved.get("runs", [])
    return bool(runs) and not any(r.get("error") for r in runs)


def _burners(count: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", BURNER],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def run_draw(
    d: draws.Draw,
    out: Path,
    repeat: int = 1,
    link: tuple[float, float] | None = None,
    log: Any = None,
    runner: Runner = suite.run_scenario,
) -> dict[str, Any]:
    """Run ``d`` ``repeat`` times into ``OUT/runs/``, diagnose, write its file."""
    sc = d.scenario()
    runs = []
    for k in range(1, repeat + 1):
        run_dir = out / "runs" / f"{d.name}-{k}"
        t0, load = time.monotonic(), os.getloadavg()[0]
        burners = _burners(d.contended)
        try:
            runner(sc, run_dir, log)
        except Exception as exc:  # one line, and the set goes on
            runs.append({"run": k, "run_dir": str(run_dir), "error": str(exc).splitlines()[0]})
            continue
        finally:
            _stop(burners)
        wall = time.monotonic() - t0
        load = max(load, os.getloadavg()[0])
        runs.append(record_of(d, run_dir, k, link, load=load, wall_s=wall))
    saved = {"draw": d.to_json(), "link": list(link) if link else None, "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    record_path(out, d).write_text(json.dumps(saved, indent=1, default=str))
    return saved


def record_of(
    d: draws.Draw,
    run_dir: Path,
    k: int,
    link: tuple[float, float] | None,
    load: float = 0.0,
    wall_s: float = 0.0,
) -> dict[str, Any]:
    """What one run of ``d`` showed: each phase diagnosed on its own."""
    sc = d.scenario()
    th = Thresholds() if link is None else Thresholds(link_gbps=link[1], link_alpha_us=link[0])
    phases = sc.phases()
    traces = suite.phase_traces(run_dir, [n for _, n, _ in phases])
    shown = []
    for i, (trace, (kind, _, _)) in enumerate(zip(traces, phases, strict=True)):
        if kind == suite.WARMUP:
            continue
        analysis = analyze(trace, th)
        shown.append(_phase(d, analysis, i, kind))
    return {
        "run": k,
        "run_dir": str(run_dir),
        "load": round(load, 2),
        "wall_s": round(wall_s, 1),
        "phases": shown,
    }


def _phase(d: draws.Draw, analysis: Analysis, i: int, kind: str) -> dict[str, Any]:
    table = analysis.what_if[0] if analysis.what_if else None
    found = [f.to_json() for f in analysis.findings]
    phase: dict[str, Any] = {
        "index": i,
        "kind": kind,
        "iteration_ms": round(analysis.runs[0].iteration_ns / 1e6, 4),
        "findings": [{k: f[k] for k in KEPT} for f in found],
        "what_if": table.to_json()["rows"] if table is not None else [],
        "replay_error": table.replay_error if table is not None else None,
    }
    if kind == suite.PLANTED:
        phase["predicted_ms"], phase["predicted_by"] = predicted(d, analysis)
    return phase


def predicted(d: draws.Draw, analysis: Analysis) -> tuple[float | None, str]:
    """The iteration (ms) the replay of a planted phase predicts without the planted
    cause, and the what-if row it comes from: the row of the planted mode when the
    diagnosis has one (the cause's own counterfactual), else the same counterfactual
    built for the planted ranks or links (:func:`suite.predict`); for two, both
    causes' together (:func:`suite.predict_together`)."""
    table = analysis.what_if[0] if analysis.what_if else None
    if table is None or not d.causes:
        return None, ""
    if len(d.causes) > 1:
        # the planted causes' own counterfactuals together, not "all causes found
        # removed": the rerun without the plants keeps the job's own shape
        parts = [
            (c.mode, c.kind if c.kind in ("jitter", "stall") else _fallback(d, c)) for c in d.causes
        ]
        return suite.predict_together(analysis, parts), "planted"
    cause = d.causes[0]
    if cause.kind in ("jitter", "stall"):  # their tail removed as well (suite.predict)
        return suite.predict(analysis, cause.kind), cause.kind
    row = suite.costliest_row(table, cause.mode)
    if row is not None:
        return row.iteration_ns / 1e6, row.name
    name = _fallback(d, cause)
    if not name:
        return None, ""
    return suite.predict(analysis, name), name


def _fallback(d: draws.Draw, cause: draws.Cause) -> str:
    per_host = d.ranks // d.hosts
    if cause.kind in ("straggler", "cpu_starved"):
        kind = "straggler" if cause.kind == "straggler" else "cpu_starvation"
        return f"{kind}:{','.join(map(str, cause.ranks))}"
    if cause.kind == "slow_link":
        host = int(cause.nodes[0][1:])
        ranks = range(host * per_host, (host + 1) * per_host)
        return "slow_link:" + ",".join(map(str, ranks))
    if cause.kind == "contention":
        return "links"
    if cause.kind == "overlap":
        return "overlap"
    return ""  # small calls bucketed: only the latency detector builds that replay


def rescore(
    out: Path, chosen: list[draws.Draw], log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Diagnose the saved runs of ``chosen`` in ``out`` again and rewrite their files
    (runs that failed or whose directory is gone stay as they were); nothing runs."""
    saved_all = []
    for d in chosen:
        path = record_path(out, d)
        if not path.is_file():
            continue
        saved = json.loads(path.read_text())
        link = tuple(saved["link"]) if saved.get("link") else None
        runs = []
        for r in saved["runs"]:
            if r.get("error") or not Path(r["run_dir"]).is_dir():
                runs.append(r)
                continue
            try:
                runs.append(
                    record_of(
                        d,
                        Path(r["run_dir"]),
                        r["run"],
                        link,
                        r.get("load", 0.0),
                        r.get("wall_s", 0.0),
                    )
                )
            except Exception as exc:  # a damaged run directory: said, the rest goes on
                log(f"{path.name}: run {r['run']}: {exc}")
                runs.append(r)
        saved = {**saved, "draw": d.to_json(), "runs": runs}
        path.write_text(json.dumps(saved, indent=1, default=str))
        saved_all.append(saved)
    return saved_all
