"""The short ranked summary ``syncpace diagnose`` prints."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from syncpace.analysis import Analysis, Finding, Severity
from syncpace.console import make_console

_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "green"}


def print_analysis(analysis: Analysis, console: Console | None = None, actions: int = 2) -> None:
    console = console or make_console()
    for run in analysis.runs:
        it = run.iteration
        console.print(
            f"[bold]{escape(run.run)}[/]: {run.world_size} ranks ({escape(run.source)}), "
            f"iteration {it.get('mean', 0) / 1e6:.2f} ms (p99 {it.get('p99', 0) / 1e6:.2f}, "
            f"CV {it.get('cv', 0):.3f}), network share {run.comm.get('network_share', 0):.0%}, "
            f"exposed {run.comm.get('exposed_share', 0):.1%}"
        )
        if run.pacing is not None:
            console.print("  " + escape(pacing_line(run.pacing)))
    if len(analysis.scaling) > 1:
        points = ", ".join(
            f"{p.world_size}: strong {p.strong_efficiency:.0%} / weak {p.weak_efficiency:.0%}"
            for p in analysis.scaling
        )
        console.print(f"scaling efficiency by world size: {points}")
    table = Table("#", "severity", "mode", "cost", "conf.", "where", "finding", expand=True)
    # cost: what removing the cause saves of the iteration (replayed), ± its error
    multi = len(analysis.runs) > 1
    for i, f in enumerate(analysis.findings, 1):
        table.add_row(
            str(i),
            f"[{_STYLE[f.severity]}]{f.severity}[/]",
            f.mode,
            f"{f.cost:.1%}" + (f"±{f.cost_error:.1%}" if f.cost_error is not None else ""),
            f"{f.confidence:.2f}",
            escape(_where(f) + (f" @ {f.run}" if multi else "")),
            escape(f.summary),
        )
    console.print(table)
    for f in analysis.findings[:actions]:
        if f.mode == "healthy":
            continue
        console.print(f"[bold]{f.mode}[/] - what to do:")
        for action in f.actions:
            console.print(f"  - {escape(action)}")
    console.print("[dim]busbw uses the nccl-tests factors, which assume a flat topology.[/]")


def print_what_if(analysis: Analysis, console: Console | None = None) -> None:
    """Each run's what-if table: the plain replay against the measured iterations, then
    every counterfactual's predicted iteration, what it saves and the replay's error."""
    console = console or make_console()
    for run, table in zip(analysis.runs, analysis.what_if, strict=False):
        if table is None:
            console.print(f"[bold]{escape(run.run)}[/]: no replay (no collectives or steps)")
            continue
        b = table.base
        t = Table(
            "what if",
            "iteration ms",
            "saved ms",
            "saved",
            "±",
            title=(
                f"{escape(run.run)}: measured {b.measured_ns / 1e6:.2f} ms per iteration, "
                f"replayed {b.replayed_ns / 1e6:.2f} ms ({b.error:+.2%}, {b.steps} steps)"
            ),
            expand=False,
        )
        for row in table.rows:
            t.add_row(
                escape(row.description),
                f"{row.iteration_ns / 1e6:.2f}",
                f"{row.saving_ns / 1e6:.2f}",
                f"{row.saving:.1%}",
                f"{row.error:.1%}",
            )
        console.print(t)
    console.print(
        "[dim]saved: iteration time a replay of the trace saves with that cause removed; "
        "±: the replay's own error (plain replay vs measured, and the spread of the "
        "replayed steps).[/]"
    )


def pacing_line(p: dict) -> str:
    """One line on what the pacer did and whether the A/B guard found it helps."""
    verdict = {
        "helps": "kept on: paced steps were faster",
        "no_help": "turned off: no benefit shown",
        "not_needed": "never needed (skew stayed low)",
        "probing": "still probing",
        None: "no A/B guard",
    }.get(p.get("ab_state"), str(p.get("ab_state")))
    confidence = p.get("ab_confidence")
    gain = p.get("ab_throughput_gain")
    detail = ""
    if confidence is not None and gain is not None:
        needed = p.get("ab_required")
        of = f" of {needed:.2f} needed" if needed is not None else ""
        detail = f" (throughput {gain:+.1%} paced vs unpaced, confidence {confidence:.2f}{of})"
    stopped = f"; stopped: {p['errors'][0]}" if p.get("errors") else ""
    return (
        f"pacing ({p.get('policy')}): {p.get('fraction_paced', 0):.0%} of steps paced, "
        f"max delay {p.get('delay_max_s', 0) * 1e3:.1f} ms (bound "
        f"{p.get('bound_s', 0) * 1e3:.0f} ms); A/B {verdict}{detail}{stopped}"
    )


def _where(f: Finding) -> str:
    parts = []
    if f.ranks:
        parts.append("ranks " + ",".join(map(str, f.ranks[:8])) + ("…" if len(f.ranks) > 8 else ""))
    if f.nodes:
        parts.append(",".join(f.nodes[:4]) + ("…" if len(f.nodes) > 4 else ""))
    return " ".join(parts) or "-"
