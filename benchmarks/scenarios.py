"""The planted-cause suite, full form: every scenario run twice, on localhost and across
the emulated fabric (root), diagnosed, scored into a confusion matrix; every
counterfactual checked against a real rerun of the same job without its cause.

    python benchmarks/scenarios.py [--runs 2] [--only a,b] [--where local,fabric]
                                   [--out runs/scenarios] [--no-bench] [--no-rerun]

Prints, and writes to ``OUT/scenarios.json``:

* per run: the planted cause, what came first, whether it named the planted ranks or
  hosts, any other critical finding, and the plain replay's error;
* the confusion matrix (rows planted, columns found first);
* per counterfactual case: the what-if row's predicted iteration time against the
  measured iteration of the rerun without the cause, and the error.

Fabric scenarios are diagnosed with the link rate of an all-reduce benchmark on a star
of the same hosts (what ``syncpace diagnose --bench`` does); ``--no-bench`` leaves it
out. Takes many minutes (each job starts its ranks from scratch).
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
import planted  # noqa: E402

from syncpace.analysis import Thresholds, analyze  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--only", default="", help="comma list of scenario names")
    p.add_argument("--where", default="local,fabric")
    p.add_argument("--out", default="runs/scenarios")
    p.add_argument("--no-bench", action="store_true")
    p.add_argument("--no-rerun", action="store_true")
    args = p.parse_args()
    console = Console(width=140)
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
    outcomes: list[planted.Outcome] = []
    cases: list[dict] = []
    started = time.monotonic()
    for sc in chosen:
        link = _link(sc, links, out, log, console, args.no_bench)
        for k in range(1, args.runs + 1):
            run_dir = out / f"{sc.name}-{k}"
            t0 = time.monotonic()
            try:
                planted.run_scenario(sc, run_dir, log)
            except Exception as exc:  # reported, and the suite goes on
                console.print(f"[red]{sc.name} run {k}: {exc}[/]")
                continue
            analysis = _analyze(run_dir, link)
            o = planted.score(sc, analysis, k, str(run_dir))
            o.wall_s = time.monotonic() - t0
            outcomes.append(o)
            mark = "[green]ok[/]" if o.passed else "[red]MISS[/]"
            console.print(
                f"{mark} {sc.name} #{k} ({sc.where}): planted {sc.expected}, first {o.top} "
                f"{o.top_ranks or ''}{o.top_nodes or ''}; false critical {o.false_critical or '-'}"
                f"; replay error {o.replay_error or 0:+.3%}; {o.wall_s:.0f} s"
            )
        if sc.clean is not None and not args.no_rerun:
            cases.extend(_reruns(sc, out, log, link, outcomes, args.runs, console))
    _report(console, outcomes, cases)
    summary = {
        "outcomes": [o.to_json() for o in outcomes],
        "counterfactual_vs_rerun": cases,
        "links": {f"{h}x{r}": v for (h, r), v in links.items()},
        "wall_s": time.monotonic() - started,
        "confusion": planted.confusion_text(outcomes),
    }
    (out / "scenarios.json").write_text(json.dumps(summary, indent=1, default=str))
    console.print(f"{out / 'scenarios.json'} ({summary['wall_s']:.0f} s)")
    return 0


def _link(sc, links, out, log, console, skip) -> tuple[float, float] | None:
    if sc.fabric is None or skip:
        return None
    key = (sc.hosts, str(sc.fabric.get("host_rate")))
    if key not in links:
        console.print(f"benchmark: all-reduce on a star of {key[0]} hosts at {key[1]}")
        links[key] = planted.bench_link(key[0], key[1], out / f"bench-{key[0]}-{key[1]}", log)
        console.print(f"  alpha {links[key][0]:.0f} us, busbw {links[key][1] * 8e3:.1f} Mbit/s")
    return links[key]


def _analyze(run_dir: Path, link: tuple[float, float] | None):
    from syncpace.control.policy import PacingConfig, make_policy

    th = Thresholds() if link is None else Thresholds(link_gbps=link[1], link_alpha_us=link[0])
    return analyze(run_dir, th, pacer=lambda n: make_policy(PacingConfig(), n))


def _reruns(sc, out, log, link, outcomes, runs, console) -> list[dict]:
    """The clean twin, run ``runs`` times: its measured iteration against each planted
    run's what-if row."""
    measured = []
    for k in range(1, runs + 1):
        run_dir = out / f"{sc.name}-clean-{k}"
        try:
            planted.run_scenario(sc.clean, run_dir, log)
        except Exception as exc:
            console.print(f"[red]{sc.name} clean rerun {k}: {exc}[/]")
            continue
        measured.append(analyze(run_dir).runs[0].iteration_ns / 1e6)
    if not measured:
        return []
    real = statistics.mean(measured)
    found = []
    for o in outcomes:
        if o.scenario != sc.name:
            continue
        row = next((r for r in o.what_if if r["name"] == sc.what_if), None)
        if row is None:
            console.print(f"[red]{sc.name} #{o.run}: no what-if row {sc.what_if!r}[/]")
            continue
        case = {
            "scenario": sc.name,
            "run": o.run,
            "what_if": sc.what_if,
            "planted_ms": round(o.iteration_ms, 3),
            "predicted_ms": row["iteration_ms"],
            "rerun_ms": round(real, 3),
            "rerun_runs_ms": [round(m, 3) for m in measured],
            "error": round(row["iteration_ms"] / real - 1, 4),
        }
        found.append(case)
        console.print(
            f"  counterfactual {sc.what_if}: predicted {row['iteration_ms']:.1f} ms, rerun "
            f"{real:.1f} ms ({case['error']:+.1%}); planted run {o.iteration_ms:.1f} ms"
        )
    return found


def _report(console: Console, outcomes, cases) -> None:
    if outcomes:
        console.rule("confusion matrix (rows: planted; columns: first finding)")
        console.print(planted.confusion_text(outcomes), markup=False)
        passed = sum(o.passed for o in outcomes)
        first = sum(o.first for o in outcomes)
        named = sum(o.first and o.named for o in outcomes)
        false = sum(bool(o.false_critical) for o in outcomes)
        console.print(
            f"{passed}/{len(outcomes)} runs pass: planted cause first {first}, and named "
            f"exactly {named}; runs with a false critical finding: {false}"
        )
        errors = [abs(o.replay_error) for o in outcomes if o.replay_error is not None]
        if errors:
            mid = statistics.median(errors)
            console.print(
                f"plain replay |error| of the mean iteration: median {mid:.3%}, "
                f"max {max(errors):.3%} over {len(errors)} real traces"
            )
    if cases:
        t = Table(title="counterfactual vs real rerun without the cause")
        for col in ("scenario", "run", "what if", "planted ms", "predicted ms", "rerun ms", "err"):
            t.add_column(col, justify="right")
        for c in cases:
            t.add_row(
                c["scenario"],
                str(c["run"]),
                c["what_if"],
                f"{c['planted_ms']:.1f}",
                f"{c['predicted_ms']:.1f}",
                f"{c['rerun_ms']:.1f}",
                f"{c['error']:+.1%}",
            )
        console.print(t)
        errs = sorted(abs(c["error"]) for c in cases)
        p90 = errs[min(len(errs) - 1, int(round(0.9 * (len(errs) - 1))))]
        console.print(
            f"|error| median {statistics.median(errs):.1%}, p90 {p90:.1%}, max {errs[-1]:.1%} "
            f"over {len(errs)} cases"
        )


if __name__ == "__main__":
    sys.exit(main())
