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
        console.print("  parallelism: " + escape(run.parallelism.describe()))
        if run.trailing:
            console.print("  " + escape(trailing_line(run.trailing)))
        if run.pacing is not None:
            console.print("  " + escape(pacing_line(run.pacing)))
    if len(analysis.scaling) > 1:
        points = ", ".join(
            f"{p.world_size}: strong {p.strong_efficiency:.0%} / weak {p.weak_efficiency:.0%}"
            for p in analysis.scaling
        )
        console.print(f"scaling efficiency by world size: {points}")
    table = Table("#", "severity", "mode", "cost", "conf.", "where", "finding", expand=True)
    multi = len(analysis.runs) > 1
    for i, f in enumerate(analysis.findings, 1):
        table.add_row(
            str(i),
            f"[{_STYLE[f.severity]}]{f.severity}[/]",
            f.mode,
            f"{f.cost:.1%}",
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


def trailing_line(t: dict) -> str:
    """One line on the calls after the last iteration boundary (kept out of the figures)."""
    ops = ", ".join(f"{op} x{n}" for op, n in list(t.get("ops", {}).items())[:4])
    return (
        f"after the last iteration: {t.get('calls_per_rank', 0):g} calls per rank ({ops}) "
        f"over {t.get('span_ns', 0) / 1e6:.1f} ms, not counted in the iteration figures"
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
