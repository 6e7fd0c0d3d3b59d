"""``syncpace trace-info DIR [--json]``: validate a trace and summarise it."""

from __future__ import annotations

import argparse
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from syncpace.analysis import breakdown, locality, timebase
from syncpace.analysis.timebase import TimeBase
from syncpace.console import make_console, safe
from syncpace.report import format as fmt
from syncpace.report import jsonout
from syncpace.report.breakdown import print_breakdown
from syncpace.report.format import Places
from syncpace.trace.reader import Trace, load_trace
from syncpace.trace.summary import TraceSummary, summarize


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trace-info",
        help="validate a trace directory and print its summary",
        description="Validate a syncpace run directory and print ranks, steps, events per op "
        "and per rank, bytes and clock uncertainty.",
    )
    parser.add_argument("dir", help="run directory written by syncpace run / attach()")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    trace = load_trace(args.dir)
    if args.json:
        data = summarize(trace).to_json()
        data["time_base"] = time_base_json(*timebase.of_trace(trace))
        data["breakdown"] = breakdown_json(trace)
        print(jsonout.dumps(data, sort_keys=True))
    else:
        print_trace_info(trace)
    return 0


def print_trace_info(trace: Trace, console: Console | None = None) -> None:
    """The summary of ``trace`` and the clock its analysis reads."""
    console = console or make_console()
    print_summary(summarize(trace), console, time_base_line(*timebase.of_trace(trace)))
    print_trace_breakdown(trace, console)


#: Iterations left out of trace-info's tables, as diagnose leaves them out by default.
WARMUP_STEPS = 1


def breakdown_json(trace: Trace) -> dict[str, Any]:
    """The per-operation table and the per-rank breakdown, after the warm-up."""
    return {
        "warmup_steps": WARMUP_STEPS,
        **breakdown.of_trace(trace, warmup_steps=WARMUP_STEPS).to_json(),
    }


def print_trace_breakdown(trace: Trace, console: Console) -> None:
    """The per-operation table and the per-rank breakdown of the trace."""
    b = breakdown.of_trace(trace, warmup_steps=WARMUP_STEPS)
    if trace.steps.height and int(trace.steps["step"].max()) >= WARMUP_STEPS:
        console.print(
            f"[dim]the first {WARMUP_STEPS} iteration left out as warm-up, as diagnose does:[/]"
        )
    print_breakdown(b, console, Places.of(locality.placement(trace.meta)))


def time_base_json(base: TimeBase, ahead: pl.DataFrame) -> dict[str, Any]:
    """Which clock the analysis of this trace uses and, on the device's, each rank's
    CPU run-ahead (ns)."""
    out = base.to_json()
    if ahead.height:
        out["run_ahead_ns"] = {
            str(r["rank"]): {"p50": r["run_ahead_p50_ns"], "p90": r["run_ahead_p90_ns"]}
            for r in ahead.iter_rows(named=True)
        }
    return out


def time_base_line(base: TimeBase, ahead: pl.DataFrame) -> str:
    """The clock the figures will be on, why, and each rank's CPU run-ahead."""
    line = f"clock of the figures: {base.label()}"
    if base.note():
        line += f" ({base.note()})"
    if ahead.height:
        each = ", ".join(
            f"r{r['rank']} {r['run_ahead_p50_ns'] / 1e6:.2f} ({r['run_ahead_p90_ns'] / 1e6:.2f})"
            for r in ahead.iter_rows(named=True)
        )
        line += f"; CPU run-ahead of the device, ms median (p90): {each}"
    return line


#: Warnings printed in full; the rest are counted (all of them are in --json).
MAX_WARNINGS = 20


def print_summary(
    summary: TraceSummary, console: Console | None = None, clock_line: str | None = None
) -> None:
    """Everything from the trace is escaped: names can hold markup or control codes.
    ``clock_line``: which clock the analysis reads (:func:`time_base_line`)."""
    console = console or make_console()
    hosts = ", ".join(f"{safe(h)} ({len(r)})" for h, r in summary.hosts.items())
    console.print(f"[bold]{safe(summary.path)}[/]: {summary.world_size} ranks on {hosts}")
    console.print(f"steps: {summary.steps}   events: {summary.events:,}")
    if summary.missing_ranks:
        console.print(f"[red]missing ranks:[/] {summary.missing_ranks}")
    table = Table("op", "events", "bytes", title="events per op")
    for op, row in summary.events_per_op.items():
        table.add_row(safe(op), f"{row['count']:,}", _human_bytes(row["bytes"]))
    console.print(table)
    per_rank = "  ".join(f"r{r}:{n}" for r, n in summary.events_per_rank.items())
    console.print(f"events per rank: {per_rank}")
    clock = summary.clock
    unc = clock["max_uncertainty_ns"]
    console.print(
        f"clock: max |offset| {clock['max_abs_offset_ns'] / 1e6:.3f} ms, max uncertainty "
        + ("unknown" if unc is None else f"{unc / 1e3:.1f} µs")
        + (f", unaligned ranks {clock['unaligned_ranks']}" if clock["unaligned_ranks"] else "")
    )
    if clock_line:
        console.print(safe(clock_line), soft_wrap=True)
    if summary.pacing is not None:
        p = summary.pacing
        console.print(
            f"pacing: {safe(p['policy'])}, {p['fraction_paced']:.0%} of steps paced, delay "
            f"total {p['delay_sum_s'] * 1e3:.1f} ms, max {p['delay_max_s'] * 1e3:.1f} ms "
            f"(bound {p['bound_s'] * 1e3:.0f} ms); {safe(fmt.ab_words(p))}"
        )
        for error in p["errors"]:
            console.print(f"[yellow]pacing stopped:[/] {safe(error)}")
    if summary.rotation is not None:
        r = summary.rotation
        pins = ", ".join(f"{safe(reason)} at step {step}" for reason, step in r["pins"][:5])
        console.print(
            f"always-on: segments of {r['segment_s']:g} s, the last {r['keep_s']:g} s kept, "
            f"budget {_human_bytes(r['budget_bytes_per_rank'])} a rank; "
            f"{r['segments_removed']:,} of {r['segments_written']:,} segments rotated out "
            f"({r['events_removed']:,} events, {_human_bytes(r['bytes_removed'])}); "
            f"per-step summaries of {r['summary_steps']:,} steps"
            + (f"; kept in full around: {pins}" if pins else ""),
            soft_wrap=True,
        )
    if summary.counters is not None:
        console.print(safe(counters_line(summary.counters)), soft_wrap=True)
    print_completeness(summary.completeness_lines, summary.warnings, console)


def counters_line(c: dict[str, Any]) -> str:
    """The counters beside the trace, in one line."""
    parts = []
    if c["hosts"] or c["rows"]:
        hosts = ", ".join(c["hosts"][:6]) + (" …" if len(c["hosts"]) > 6 else "")
        sources = ", ".join(c["sources"]) or "none readable"
        parts.append(
            f"host counters of {len(c['hosts'])} host{'s' if len(c['hosts']) != 1 else ''} "
            f"({hosts}): {sources}; {c['series']:,} series over {c['span_s']:.1f} s"
        )
    if c["link_counters"]:
        parts.append(f"link counters of the emulated fabric ({c['link_counters']})")
    return "counters: " + "; ".join(parts)


def print_completeness(lines: list[str], warnings: list[str], console: Console) -> None:
    """The loss account (declared vs found, per rank) and the reader's warnings."""
    lossy = len(lines) > 1 or bool(warnings)
    for i, line in enumerate(lines):
        style = "yellow" if lossy and i else ("yellow" if lossy else "green")
        console.print(f"[{style}]{safe(line)}[/]", soft_wrap=True)
    for warning in warnings[:MAX_WARNINGS]:
        console.print(f"[yellow]warning:[/] {safe(warning)}", soft_wrap=True)
    if len(warnings) > MAX_WARNINGS:
        console.print(f"[yellow]warning:[/] … and {len(warnings) - MAX_WARNINGS} more (see --json)")


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
