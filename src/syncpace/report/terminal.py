"""The summary ``syncpace diagnose`` prints: the verdict first, then the runs (side by
side when there are several), the findings merged across runs, and what to do.

Every number goes through ``report.format`` (the same text the HTML report shows);
every string from a trace is escaped for rich markup and control characters
(``console.safe``). Each run's completeness account and the reader's warnings follow
the run: loss is printed here, not only in ``--json``.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from syncpace.analysis import Analysis, Finding, Role, RunComparison, RunMetrics, Severity, modes
from syncpace.analysis.api import NO_REPLAY
from syncpace.console import make_console, safe, visible
from syncpace.report import format as fmt
from syncpace.report.breakdown import print_breakdowns
from syncpace.report.format import pacing_line
from syncpace.report.hang import print_hang, stopped
from syncpace.report.merge import MergedFinding, merge_findings
from syncpace.report.verdict import Verdict, build_verdict, where

__all__ = ["pacing_line", "print_analysis", "print_what_if", "verdict_panel"]

_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "green"}


def print_analysis(analysis: Analysis, console: Console | None = None, actions: int = 2) -> None:
    console = console or make_console()
    hang = stopped(analysis.findings)
    if hang is not None:  # a job that stopped: say so before anything else
        print_hang(hang, console)
    merged = merge_findings(analysis)
    verdict = build_verdict(analysis, merged)
    console.print(verdict_panel(verdict))
    print_runs(analysis, console)
    print_findings(analysis, merged, console)
    print_actions(merged, console, actions)
    print_breakdowns(analysis, console)
    console.print(f"[dim]{GLOSSARY}[/]")


def verdict_panel(v: Verdict) -> Panel:
    # Text is never parsed as markup; visible() keeps control characters from traces out.
    lines: list[Text] = [Text(visible(t), style="dim") for t in v.timing]
    for i, c in enumerate(v.causes, 1):
        line = Text(f"{i}. ")
        line.append(visible(c.title), style="bold")
        line.append(visible(f" — {c.cost}"))
        lines.append(line)
        lines.append(Text(visible(f"   where: {c.where} · how sure: {c.sure}")))
    if v.also:
        also = "; ".join(f"{c.title} — {c.where}, {c.cost}" for c in v.also)
        lines.append(Text("also found: ", style="bold").append(visible(also), style="not bold"))
    for line in v.costs:
        lines.append(Text("costs: ", style="bold").append(visible(line), style="not bold"))
    lines.append(Text("do first: ", style="bold").append(visible(v.first_action), style="not bold"))
    for q in v.quality:
        lines.append(Text(visible(f"data quality: {q}"), style="yellow"))
    lines.append(Text(visible(f"data: {v.trust}"), style="dim"))
    worst = max((c.severity for c in v.causes), default=Severity.INFO)
    return Panel(
        Group(*lines),
        title=Text(f"Verdict: {v.headline}", style="bold"),
        title_align="left",
        border_style=_STYLE[worst].replace("bold ", ""),
    )


def print_runs(analysis: Analysis, console: Console) -> None:
    names = fmt.run_names([r.run for r in analysis.runs])
    if len(analysis.runs) == 1:
        run = analysis.runs[0]
        it = run.iteration
        console.print(
            f"[bold]{safe(run.run)}[/]: {run.world_size} ranks ({safe(run.source)}), "
            f"iteration {fmt.duration_ns(run.iteration_ns)} (p99 "
            f"{fmt.duration_ns(it.get('p99', 0))}, varies {fmt.variation(it.get('cv', 0))}), "
            f"network busy {fmt.percent(run.comm.get('network_share', 0))}, exposed "
            f"(not hidden by compute) {fmt.percent(run.comm.get('exposed_share', 0))}"
        )
        console.print("  parallelism: " + safe(run.parallelism.describe()))
        console.print("  clock of the figures: " + safe(_time_base(run)), soft_wrap=True)
        if run.trailing:
            console.print("  after the last iteration: " + safe(fmt.trailing_line(run.trailing)))
        for kind in run.other_kinds:
            console.print("  note: " + safe(fmt.other_kind_line(kind)), soft_wrap=True)
        if run.pacing is not None:
            console.print("  " + safe(pacing_line(run.pacing)))
        print_whole_run(run, console)
        print_loss(run.quality, console)
        print_unmeasurable(run, console)
        return
    changes = {c.run: c for c in analysis.comparison}
    table = Table("", *(safe(names[r.run]) for r in analysis.runs), title="runs side by side")
    rows = [
        ("ranks", [f"{r.world_size} ({r.source})" for r in analysis.runs]),
        ("iteration, mean", [fmt.duration_ns(r.iteration_ns) for r in analysis.runs]),
        ("iteration, p99", [fmt.duration_ns(r.iteration.get("p99", 0)) for r in analysis.runs]),
        ("iteration varies", [fmt.variation(r.iteration.get("cv", 0)) for r in analysis.runs]),
        (
            "against baseline",
            [_change(changes.get(r.run), names, analysis.study) for r in analysis.runs],
        ),
        ("network busy", [fmt.percent(r.comm.get("network_share", 0)) for r in analysis.runs]),
        (
            "exposed (not hidden)",
            [fmt.percent(r.comm.get("exposed_share", 0)) for r in analysis.runs],
        ),
        ("parallelism", [r.parallelism.describe() for r in analysis.runs]),
        ("clock", [_time_base(r) for r in analysis.runs]),
        (
            "after last iteration",
            [fmt.trailing_line(r.trailing) if r.trailing else "—" for r in analysis.runs],
        ),
        (
            "paced steps",
            [
                fmt.percent(r.pacing.get("fraction_paced") or 0) if r.pacing else "off"
                for r in analysis.runs
            ],
        ),
    ]
    for label, cells in rows:
        table.add_row(label, *(safe(c) for c in cells))
    console.print(table)
    if analysis.relation:
        console.print(f"[yellow]{safe(analysis.relation)}[/]", soft_wrap=True)
    for r in analysis.runs:
        if r.pacing is not None:
            console.print(_hanging(" ", f"{names[r.run]}: {pacing_line(r.pacing)}"))
    for r in analysis.runs:
        console.print(f"[bold]{safe(names[r.run])}[/]:")
        print_whole_run(r, console)
        print_loss(r.quality, console)
        print_unmeasurable(r, console)
    if analysis.scaling:
        points = ", ".join(
            f"{p.world_size}: strong {fmt.percent(p.strong_efficiency)} / weak "
            f"{fmt.percent(p.weak_efficiency)}"
            for p in analysis.scaling
        )
        console.print(f"scaling efficiency by world size: {points}")


def _time_base(run: RunMetrics) -> str:
    return fmt.time_base_line(run.time_base, run.per_rank, fmt.Places.of(run.placement))


def print_whole_run(run: RunMetrics, console: Console) -> None:
    """One line on the whole run of an always-on job (its per-step summaries)."""
    if run.whole_run is not None:
        line = fmt.whole_run_line(run.whole_run, fmt.Places.of(run.placement))
        console.print("  " + safe(line), soft_wrap=True)


#: Reader warnings printed per run; the rest are counted (all are in --json).
MAX_WARNINGS = 5


def print_loss(quality: dict, console: Console) -> None:
    """What the trace declared against what it held, per rank, and the reader's
    warnings: loss is printed by every verb, never only in --json."""
    lines = quality.get("completeness_lines") or []
    warnings = quality.get("warnings") or []
    lossy = len(lines) > 1 or bool(warnings)
    # never wrapped by rich: the files they name stay whole for whoever searches them
    for line in lines:
        console.print(f"  [{'yellow' if lossy else 'dim'}]{safe(line)}[/]", soft_wrap=True)
    for warning in warnings[:MAX_WARNINGS]:
        console.print(f"  [yellow]warning:[/] {safe(warning)}", soft_wrap=True)
    if len(warnings) > MAX_WARNINGS:
        console.print(f"  [yellow]warning:[/] … and {len(warnings) - MAX_WARNINGS} more (--json)")


#: How each kind of value left out is named in a sentence.
_VALUES = {"busbw": "bus bandwidth values", "nic_utilisation": "NIC utilisation windows"}


def print_unmeasurable(run: RunMetrics, console: Console) -> None:
    """The values the physics forbids, left out of every figure (analysis.limits): how
    many and why, so a figure with fewer points than calls is never a surprise."""
    for u in run.unmeasurable:
        if u.count:
            what = _VALUES.get(u.what, u.what)
            line = f"{u.count} of {u.total} {what} left out as unmeasurable: {u.reason}"
            console.print(f"  [yellow]{safe(line)}[/]", soft_wrap=True)


def _change(c: RunComparison | None, names: dict[str, str], study: str = "") -> str:
    if c is None or c.iteration_change is None or c.baseline is None:
        return "none (different jobs)" if study == "separate" else "baseline"
    return f"{fmt.signed_percent(c.iteration_change)} vs {names[c.baseline]}"


#: The terms the summary uses, said once at its end.
GLOSSARY = (
    "CV: the iterations' standard deviation over their mean. Exposed: communication "
    "time not hidden behind compute. busbw uses the nccl-tests factors, which assume a "
    "flat topology."
)

#: Below this many columns the findings are a list, not a table: a table's seven
#: columns there wrap a finding's text a few words a line (32 lines for one finding at
#: 80 columns, 6 at 140).
TABLE_MIN_WIDTH = 150


def print_findings(analysis: Analysis, merged: list[MergedFinding], console: Console) -> None:
    names = fmt.run_names([r.run for r in analysis.runs])
    places = {r.run: fmt.Places.of(r.placement) for r in analysis.runs}
    caption = _cost_caption(analysis, names, merged)
    if console.width < TABLE_MIN_WIDTH:
        _finding_list(merged, places, console)
        console.print(f"[dim]{caption}[/]")
        return
    table = Table(expand=True, caption=caption)
    table.add_column("#", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("finding", ratio=1)
    table.add_column("cost", no_wrap=True)
    table.add_column("how sure", no_wrap=True)
    table.add_column("where", ratio=1)
    table.add_column("what was measured", ratio=3)
    for i, m in enumerate(merged, 1):
        first = m.first
        where_ = where(m, places.get(first.run, fmt.Places({}, {})))
        table.add_row(
            str(i),
            f"[{_STYLE[m.severity]}]{m.severity}[/]",
            safe(fmt.mode_title(m.mode)),
            _costs(m),
            f"{m.confidence:.2f}",
            safe(where_),
            safe(first.summary),
        )
    console.print(table)


def _cost_cell(f: Finding | None) -> str:
    """A cause's cost; a symptom's in parentheses: it is not added to the causes'."""
    if f is None:
        return "—"
    return f"({fmt.percent(f.cost)})" if _is_symptom(f) else fmt.percent(f.cost)


def _is_symptom(f: Finding) -> bool:
    return f.symptom or modes.has_role(f.mode, Role.SYMPTOM)


def _cost_caption(analysis: Analysis, names: dict[str, str], merged: list[MergedFinding]) -> str:
    """What the cost column is, so that no one adds it up."""
    per_run = ""
    if len(analysis.runs) > 1:
        per_run = f", per run ({' / '.join(names[r.run] for r in analysis.runs)})"
    text = (
        f"cost: what removing that cause alone saves in a replay of the run, as a share of "
        f"its iteration{per_run}; causes overlap, so costs do not add up (together: the "
        "verdict's costs line)"
    )
    if any(_is_symptom(f) for m in merged for f in m.found):
        text += "; (in parentheses): a symptom of the causes, not added to them"
    return safe(text)


def _costs(m: MergedFinding) -> str:
    return " / ".join(_cost_cell(f) for _, f in m.per_run)


def _finding_list(
    merged: list[MergedFinding],
    places: dict[str, fmt.Places],
    console: Console,
) -> None:
    """Each finding in a few lines, wrapped under its number: title, severity and cost;
    how sure and where; what was measured."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for i, m in enumerate(merged, 1):
        first = m.first
        where_ = where(m, places.get(first.run, fmt.Places({}, {})), brief=True)
        body = Text()
        body.append(visible(fmt.mode_title(m.mode)), style="bold")
        body.append(f" · {m.severity}", style=_STYLE[m.severity])
        body.append(visible(f" · costs {_costs(m)}") + "\n")
        body.append(visible(f"how sure: {fmt.confidence(m.confidence)} · where: {where_}") + "\n")
        body.append(visible(first.summary))
        grid.add_row(f"{i}.", body)
    console.print(grid)


def _hanging(marker: str, text: str, style: str = "") -> Table:
    """``marker`` then ``text``, its wrapped lines indented under the text."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(marker, Text(visible(text), style=style))
    return grid


def print_actions(merged: list[MergedFinding], console: Console, actions: int) -> None:
    causes = sorted((m for m in merged if m.is_cause), key=lambda m: -m.cost)
    for m in causes[:actions]:
        console.print(f"[bold]{safe(fmt.mode_title(m.mode))}[/] - what to do:")
        for action in m.first.actions:
            console.print(_hanging("  -", action))


def print_what_if(analysis: Analysis, console: Console | None = None) -> None:
    """Each run's what-if table: the plain replay against the measured iterations, then
    every counterfactual's predicted iteration, what it saves and the replay's error."""
    console = console or make_console()
    for run, table in zip(analysis.runs, analysis.what_if, strict=False):
        if table is None:
            console.print(f"[bold]{safe(run.run)}[/]: {NO_REPLAY}")
            continue
        b = table.base
        t = Table(
            "what if",
            "iteration ms",
            "saved ms",
            "saved",
            "±",
            title=(
                f"{safe(run.run)}: measured {b.measured_ns / 1e6:.2f} ms per iteration, "
                f"replayed {b.replayed_ns / 1e6:.2f} ms ({b.error:+.2%}, {b.steps} steps)"
            ),
            expand=False,
        )
        for row in table.rows:
            t.add_row(
                safe(row.description),
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
