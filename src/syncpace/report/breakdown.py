"""The per-operation table and the per-rank breakdown as people read them: rich tables
for ``diagnose`` and ``trace-info``, an HTML section for the report (its stacked bars
drawn by :mod:`syncpace.report.breakdown_figure`, which loads plotly).

The figures are measured in :mod:`syncpace.analysis.breakdown`; here they are only
formatted (``report.format``) and escaped.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table

from syncpace.analysis import Analysis
from syncpace.analysis.breakdown import Breakdown
from syncpace.console import safe
from syncpace.report import format as fmt

#: Rows of the per-operation table shown (all of them are in --json).
MAX_OP_ROWS = 12
#: Ranks of the breakdown shown: those that waited most (all of them are in --json).
MAX_RANK_ROWS = 16

OP_HEADERS = ("op", "size", "calls", "total", "mean", "median", "p99", "busbw")
RANK_HEADERS = ("rank", "run", "compute", "exposed comm", "wait for last rank")
#: What each part means, said once under the tables.
MEANING = (
    "op time: from the last rank's arrival to completion; busbw: the median, as "
    "nccl-tests defines it. Each iteration of a rank = compute (overlapped communication "
    "included) + exposed communication (transfer it waits for after the rank's last "
    "collective) + wait for the last rank at that collective."
)


def op_rows(b: Breakdown) -> list[tuple[str, ...]]:
    """The per-operation table's rows, formatted, the largest total time first."""
    rows = []
    for r in b.operations.head(MAX_OP_ROWS).iter_rows(named=True):
        busbw = r["busbw_median_bytes_per_s"]
        rows.append(
            (
                r["op"],
                r["size_class"],
                fmt.count(r["calls"]),
                fmt.duration_ms(r["total_ms"]),
                fmt.duration_ms(r["mean_ms"]),
                fmt.duration_ms(r["median_ms"]),
                fmt.duration_ms(r["p99_ms"]),
                "—" if busbw is None else fmt.bandwidth(busbw / 1e9),
            )
        )
    return rows


def shown_ranks(b: Breakdown) -> pl.DataFrame:
    """The ranks the tables show: all, or the ones that waited least and most (a
    straggler waits least, its victims most), in rank order."""
    ranks = b.ranks
    if ranks.height <= MAX_RANK_ROWS:
        return ranks
    by_wait = ranks.sort("wait_share")
    half = MAX_RANK_ROWS // 2
    return pl.concat([by_wait.head(half), by_wait.tail(half)]).unique("rank").sort("rank")


def rank_rows(b: Breakdown, places: fmt.Places) -> list[tuple[str, ...]]:
    """The per-rank rows: run time, then each part as its share and its time."""

    def part(r: dict[str, Any], key: str) -> str:
        return f"{fmt.percent(r[f'{key}_share'])} · {fmt.duration_ms(r[f'{key}_ms'])}"

    return [
        (
            places.short(r["rank"]),
            fmt.duration_ms(r["run_ms"]),
            part(r, "compute"),
            part(r, "exposed"),
            part(r, "wait"),
        )
        for r in shown_ranks(b).iter_rows(named=True)
    ]


def check_line(b: Breakdown) -> str:
    """What the sum check found, in words."""
    if b.ranks.height == 0:
        return "no iteration with collectives to break down"
    more = b.ranks.height - shown_ranks(b).height
    line = (
        f"the three parts add up to 100% of every rank's run ({b.ranks.height} ranks"
        + (f"; {more} more in --json" if more else "")
        + ")"
        if b.shares_add_up
        else "the parts do NOT add up to the run for ranks "
        + fmt.rank_ranges(
            b.ranks.filter((pl.col("sum_of_shares") - 1.0).abs() > 1e-9)["rank"].to_list()
        )
    )
    cut = int(b.ranks["steps_cut"].sum())
    if cut:
        line += (
            f"; in {cut} rank-iterations the wait overlapped an earlier call's transfer "
            "and was counted as exposed communication"
        )
    return line


def _table(headers: tuple[str, ...], title: str) -> Table:
    """A table that fits 80 columns: light rules, cells kept on one line (a cut op name
    or size reads wrong)."""
    table = Table(
        title=safe(title),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for i, header in enumerate(headers):
        table.add_column(header, no_wrap=True, justify="left" if i < 2 else "right")
    return table


def print_breakdown(
    b: Breakdown, console: Console, places: fmt.Places | None = None, title: str = ""
) -> None:
    """The two tables and the check, on ``console``."""
    places = places or fmt.Places({}, {})
    prefix = f"{title}: " if title else ""
    if b.operations.height:
        ops = _table(OP_HEADERS, f"{prefix}collectives by op and size")
        for row in op_rows(b):
            ops.add_row(*(safe(c) for c in row))
        console.print(ops)
        if b.operations.height > MAX_OP_ROWS:
            console.print(f"  … {b.operations.height - MAX_OP_ROWS} more rows in --json")
    if b.ranks.height:
        ranks = _table(RANK_HEADERS, f"{prefix}where each rank's time went")
        for row in rank_rows(b, places):
            ranks.add_row(*(safe(c) for c in row))
        console.print(ranks)
    meaning = f" {MEANING}" if b.ranks.height or b.operations.height else ""
    console.print(f"[dim]{safe(check_line(b))}.{safe(meaning)}[/]")


def print_breakdowns(analysis: Analysis, console: Console) -> None:
    """Each run's breakdown (``diagnose``), titled by the run where there are several."""
    names = fmt.run_names([r.run for r in analysis.runs])
    for run in analysis.runs:
        title = names[run.run] if len(analysis.runs) > 1 else ""
        print_breakdown(run.breakdown, console, fmt.Places.of(run.placement), title)


def _table_html(headers: tuple[str, ...], rows: list[tuple[str, ...]], cls: str) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='ev {cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def breakdown_html(
    analysis: Analysis, place: Callable[[Any], str], step_bars: Callable[[Any], Any]
) -> str:
    """The report's section: per run the per-operation table, the per-rank breakdown and
    the per-step stacked bars. ``place`` puts a figure on the page; ``step_bars`` draws
    a run's bars (plotly, loaded by the caller)."""
    e = html.escape
    names = fmt.run_names([r.run for r in analysis.runs])
    parts = [
        '<section id="breakdown"><h2>Where the time went</h2>',
        f"<p class='meta'>{e(MEANING)}</p>",
    ]
    for run in analysis.runs:
        b = run.breakdown
        if len(analysis.runs) > 1:
            parts.append(f"<h3>{e(names[run.run])}</h3>")
        parts.append(_table_html(OP_HEADERS, op_rows(b), "ops"))
        parts.append(_table_html(RANK_HEADERS, rank_rows(b, fmt.Places.of(run.placement)), "ranks"))
        parts.append(f"<p class='meta check'>{e(check_line(b))}</p>")
        if b.steps.height:
            parts.append(place(step_bars(b)))
    parts.append("</section>")
    return "".join(parts)
