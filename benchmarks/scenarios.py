"""The planted-cause suite, full form: every scenario run twice, on localhost and across
the emulated fabric (root), every phase diagnosed and scored into a confusion matrix,
every planted phase's counterfactual checked against the measured clean phases of the
same job around it.

    python benchmarks/scenarios.py [--runs 2] [--only a,b] [--where local,fabric]
                                   [--out runs/scenarios] [--no-bench]

Each scenario is one plain PyTorch job (tests/scenarios/job.py) alternating clean and
planted phases (warm-up, clean, planted, clean, planted, clean); a planted phase must
put its cause first naming the planted ranks/hosts, a clean phase must name no cause.
Prints, and writes to ``OUT/scenarios.json``:

* per run: each phase's planted cause, what came first, whether it named the planted
  ranks or hosts, any other critical finding;
* the confusion matrix (rows planted, columns found first) and the plain replay's error;
* per planted phase: the counterfactual's predicted iteration (that cause removed in a
  replay of the phase) against the mean measured iteration of the clean phases next to
  it: the same job without the cause, seconds apart, under the same load of the
  machine, and the error.

Fabric scenarios are diagnosed with the link of an all-reduce benchmark on a fabric of
the same shape (what ``syncpace diagnose --bench`` does); ``--no-bench`` leaves it out.
Takes many minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scenarios"))

import catalogue  # noqa: E402
import suite  # noqa: E402

from syncpace.analysis import Thresholds, analyze  # noqa: E402
from syncpace.control import Pacer, PacingConfig  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--only", default="", help="comma list of scenario names")
    p.add_argument("--where", default="local,fabric")
    p.add_argument("--out", default="runs/scenarios")
    p.add_argument("--no-bench", action="store_true")
    p.add_argument(
        "--rescore",
        action="store_true",
        help="judge the run directories already in --out again (no jobs run; the fabric's "
        "link from the benchmarks there)",
    )
    args = p.parse_args()
    console = Console(width=150)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    where = set(args.where.split(","))
    if "fabric" in where and os.geteuid() != 0:
        console.print("[yellow]not root: the fabric scenarios are skipped[/]")
        where.discard("fabric")
    wanted = {n for n in args.only.split(",") if n}
    chosen = [
        s for s in catalogue.ALL.values() if s.where in where and (not wanted or s.name in wanted)
    ]
    log = open(out / "jobs.log", "w")  # noqa: SIM115 - kept open for the whole run
    links: dict[tuple[int, str], tuple[float, float]] = {}
    outcomes: list[suite.Outcome] = []
    cases: list[dict] = []
    failures: list[str] = []
    started = time.monotonic()
    failed_before: set[str] = set()
    if args.rescore and (out / "scenarios.json").exists():
        before = json.loads((out / "scenarios.json").read_text())
        saved = before.get("links", {})
        links = {(int(k.split("x")[0]), k.split("x", 1)[1]): tuple(v) for k, v in saved.items()}
        failed_before = {f.split(":")[0] for f in before.get("failed_runs", [])}
    for sc in chosen:
        link = _link(sc, links, out, log, console, args.no_bench)
        for k in range(1, args.runs + 1):
            run_dir = out / f"{sc.name}-{k}"
            t0 = time.monotonic()
            try:
                if not args.rescore:
                    suite.run_scenario(sc, run_dir, log)
                elif not run_dir.exists() or f"{sc.name} run {k}" in failed_before:
                    continue  # never run, or the job failed then: nothing whole to judge
            except Exception as exc:  # reported, and the suite goes on
                console.print(f"[red]{sc.name} run {k}: {exc}[/]")
                failures.append(f"{sc.name} run {k}: {exc}")
                continue
            got, found = _judge(sc, run_dir, k, link)
            outcomes.extend(got)
            cases.extend(found)
            marks = " ".join(
                ("[green]" if o.passed else "[red]") + f"{o.kind[0]}:{o.top}[/]" for o in got
            )
            errs = ", ".join(f"{c['error']:+.1%}" for c in found)
            console.print(
                f"{sc.name} #{k} ({sc.where}, {time.monotonic() - t0:.0f} s): {marks}"
                + (f"; counterfactual vs clean {errs}" if errs else "")
            )
            partial = {"outcomes": [o.to_json() for o in outcomes], "cases": cases}
            (out / "partial.json").write_text(json.dumps(partial, default=str))
    _report(console, outcomes, cases)
    summary = {
        "outcomes": [o.to_json() for o in outcomes],
        "counterfactual_vs_clean": cases,
        "links": {f"{h}x{r}": v for (h, r), v in links.items()},
        "failed_runs": failures or sorted(failed_before),
        "wall_s": time.monotonic() - started,
        "confusion": suite.confusion_text(outcomes) if outcomes else "",
    }
    (out / "scenarios.json").write_text(json.dumps(summary, indent=1, default=str))
    console.print(f"{out / 'scenarios.json'} ({summary['wall_s']:.0f} s)")
    return 0


def _link(sc, links, out, log, console, skip) -> tuple[float, float] | None:
    if sc.fabric is None or skip:
        return None
    key = suite.fabric_key(sc.fabric)
    if key not in links:
        console.print(f"benchmark: all-reduce on the scenario's fabric, {key}")
        links[key] = suite.bench_link(sc.fabric, out / f"bench-{key}", log)
        console.print(f"  alpha {links[key][0]:.0f} us, busbw {links[key][1] * 8e3:.1f} Mbit/s")
    return links[key]


def _judge(sc, run_dir: Path, k: int, link) -> tuple[list, list[dict]]:
    th = Thresholds() if link is None else Thresholds(link_gbps=link[1], link_alpha_us=link[0])
    phases = sc.phases()
    traces = suite.phase_traces(run_dir, [n for _, n, _ in phases])
    analyses = [
        analyze(t, th, pacer=lambda n: Pacer(PacingConfig(), n)) if kind != suite.WARMUP else None
        for t, (kind, _, _) in zip(traces, phases, strict=True)
    ]
    outcomes, cases = [], []
    for i, ((kind, _, _), analysis) in enumerate(zip(phases, analyses, strict=True)):
        if analysis is None or (kind == suite.CLEAN and not sc.score_clean):
            continue
        expect = sc if kind == suite.PLANTED else suite.clean_of(sc)
        outcomes.append(suite.score(expect, analysis, k, str(run_dir), phase=i, kind=kind))
    for i, ((kind, _, _), analysis) in enumerate(zip(phases, analyses, strict=True)):
        if kind != suite.PLANTED or not sc.what_if:
            continue
        around = [
            analyses[j].runs[0].iteration_ns / 1e6
            for j in (i - 1, i + 1)
            if 0 <= j < len(phases) and phases[j][0] == suite.CLEAN and analyses[j] is not None
        ]
        predicted = suite.predict(analysis, sc.what_if)
        if not around or predicted is None:
            continue
        clean = statistics.mean(around)
        cases.append(
            {
                "scenario": sc.name,
                "run": k,
                "phase": i,
                "what_if": sc.what_if,
                "planted_ms": round(analysis.runs[0].iteration_ns / 1e6, 3),
                "predicted_ms": round(predicted, 3),
                "clean_ms": round(clean, 3),
                "clean_phases_ms": [round(a, 3) for a in around],
                "error": round(predicted / clean - 1, 4),
            }
        )
    return outcomes, cases


def _report(console: Console, outcomes, cases) -> None:
    if outcomes:
        console.rule("confusion matrix (rows: planted; columns: first cause found)")
        console.print(suite.confusion_text(outcomes), markup=False)
        for where in ("local", "fabric"):
            part = [o for o in outcomes if o.where == where]
            if not part:
                continue
            planted_part = [o for o in part if o.kind == suite.PLANTED]
            console.print(
                f"{where}: {sum(o.passed for o in part)}/{len(part)} phases pass; planted "
                f"phases: cause first {sum(o.first for o in planted_part)}/{len(planted_part)}"
                f", named exactly {sum(o.first and o.named for o in planted_part)}; phases "
                f"with a false critical cause: {sum(bool(o.false_critical) for o in part)}"
            )
        errors = [abs(o.replay_error) for o in outcomes if o.replay_error is not None]
        if errors:
            console.print(
                f"plain replay |error| of the mean iteration over {len(errors)} phase traces: "
                f"median {statistics.median(errors):.3%}, max {max(errors):.3%}"
            )
    if cases:
        t = Table(title="counterfactual vs the measured clean phases around it")
        for col in ("scenario", "run", "phase", "what if", "planted", "predicted", "clean", "err"):
            t.add_column(col, justify="right")
        for c in cases:
            t.add_row(
                c["scenario"],
                str(c["run"]),
                str(c["phase"]),
                c["what_if"],
                f"{c['planted_ms']:.1f}",
                f"{c['predicted_ms']:.1f}",
                f"{c['clean_ms']:.1f}",
                f"{c['error']:+.1%}",
            )
        console.print(t)
        errs = sorted(abs(c["error"]) for c in cases)
        p90 = errs[min(len(errs) - 1, round(0.9 * (len(errs) - 1)))]
        console.print(
            f"|error| median {statistics.median(errs):.1%}, p90 {p90:.1%}, max {errs[-1]:.1%} "
            f"over {len(errs)} cases"
        )


if __name__ == "__main__":
    sys.exit(main())
