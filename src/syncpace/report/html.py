"""One self-contained HTML report: plotly.js inlined, works offline.

The page reads top-down the way the question goes:

0. a **hang or desync**, when the job stopped (``report.hang``): the group and call, the
   missing and the waiting ranks, the stacks — before anything else;
1. the **verdict** (``report.verdict``): the causes that cost most, who, how sure, what to
   do first, and whether the data can be trusted — on the first screen;
2. the **runs side by side** (one column per run; change against the baseline);
3. the **findings**, one card per cause with a column per run, its evidence in units
   (``report.format``) and its own small plots (``report.finding_figures``);
4. a **timeline** of the slowest and a typical iteration of each run
   (``report.timeline``), with the command that opens the whole trace in Perfetto;
5. the **overview** plots (``report.figures``) and notes.

Every string that comes from a trace (paths, host names, group names, evidence) is
escaped: in HTML with ``html.escape``, and inside the JSON the page embeds, ``<``, ``>``
and ``&`` are written as ``\\u003c`` ... so no value can close a ``<script>`` element.
The page records script errors on ``<body data-js-error>``, sets ``data-plots-ready``
once every figure is drawn, and ``data-verdict-bottom`` to where the verdict ends (px
from the top of the page): the browser test reads all three.

It stays one module of ~700 lines because it is the page's layout, read top to bottom
as the page is: its sections' contents are built elsewhere (verdict, findings' figures,
timeline, breakdown, hang, time axis), and what is left here is their order and markup.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from syncpace import __version__
from syncpace.analysis import Analysis, RunComparison, RunMetrics
from syncpace.analysis.wholerun import MAX_POINTS
from syncpace.errors import PlotlyMissing, ReportError
from syncpace.report import format as fmt
from syncpace.report.breakdown import breakdown_html
from syncpace.report.hang import hang_html, stopped
from syncpace.report.merge import MergedFinding, merge_findings
from syncpace.report.timeaxis import ORIGIN, origin_ns
from syncpace.report.verdict import Cause, Verdict, build_verdict, cost_text

_CSS = """
body{font-family:system-ui,sans-serif;margin:20px 28px;max-width:1400px;color:#222;
 line-height:1.4}
h1{font-size:21px;margin:0 0 2px} h2{font-size:18px;margin:28px 0 10px}
h3{font-size:16px;margin:0 0 6px}
.meta{color:#666;font-size:13px}
.verdict{border:1px solid #ddd;border-left:8px solid #2e7d32;background:#fbfbf8;
 padding:10px 18px 8px;margin:12px 0 6px}
.verdict.critical{border-left-color:#c62828}.verdict.warning{border-left-color:#f9a825}
.verdict h2{margin:2px 0 4px;font-size:20px}
.verdict .timing{margin:0 0 6px;color:#444;font-size:14px}
.verdict ol{margin:4px 0;padding-left:22px}.verdict li{margin:5px 0}
.verdict .title{font-weight:600;font-size:16px}.verdict .cost{font-weight:600}
.verdict .facts{font-size:14px;color:#333}.verdict .facts b{color:#555;font-weight:600}
.verdict .why{font-size:13px;color:#555}
.verdict p{margin:6px 0;font-size:14px}
.quality{background:#fff4e5;border-left:4px solid #f9a825;padding:4px 8px}
.nav a{margin-right:14px;font-size:13px}
table.t{border-collapse:collapse;font-size:13px;margin:6px 0}
table.t th,table.t td{border:1px solid #ddd;padding:3px 9px;vertical-align:top;text-align:left}
table.t th{background:#f3f3f3;font-weight:600}
table.t td.num{text-align:right;white-space:nowrap}
.finding{border-left:6px solid #888;padding:10px 14px;margin:14px 0;background:#fafafa}
.finding.critical{border-color:#c62828}.finding.warning{border-color:#f9a825}
.finding.info{border-color:#2e7d32}
.finding .sev{font-size:12px;font-weight:400;color:#666;margin-left:6px}
.card{display:grid;grid-template-columns:minmax(420px,1fr) minmax(480px,1.2fr);gap:16px}
.card>div,.runs-grid>div{overflow-x:auto}
.many .card,.many .runs-grid{grid-template-columns:1fr}
.many .plots{display:grid;grid-template-columns:1fr 1fr}
.plots{display:flex;flex-direction:column;gap:6px}
.plot{min-height:420px}.plot.small{min-height:300px}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.runs-grid{display:grid;grid-template-columns:minmax(480px,1fr) minmax(480px,1fr);gap:16px;
 align-items:start}
table.runs td{max-width:330px}
.hint{font-size:13px;color:#444;background:#f5f5f5;padding:6px 10px;font-family:monospace}
.hang{border:3px solid #c62828;padding:4px 16px;background:#fff5f5;margin:12px 0}
.hang table.ev td{border:1px solid #ddd;padding:2px 8px;vertical-align:top;font-size:13px}
pre.stack{font-size:12px;background:#f4f4f4;padding:6px;overflow-x:auto}
.completeness{font-size:13px;padding:4px 12px;margin:6px 0;border-left:6px solid #2e7d32}
.completeness.lossy{border-color:#f9a825;background:#fffbe6}.completeness .warn{color:#8a6d00}
figure.fig{margin:0}h4.fig-title{font-size:14px;font-weight:600;margin:8px 0 2px}
.fig-note,.same-plot{font-size:12px;color:#555;margin:2px 0 6px}
"""

_ERROR_HOOK = """
window.onerror=function(msg){document.body.setAttribute('data-js-error',String(msg));};
window.addEventListener('unhandledrejection',function(e){
document.body.setAttribute('data-js-error',String(e.reason));});
"""

_DRAW = """
function markVerdict(){var v=document.getElementById('verdict');if(v){
document.body.setAttribute('data-verdict-bottom',
String(Math.round(v.getBoundingClientRect().bottom+window.scrollY)));}}
markVerdict();
var plots=document.querySelectorAll('div.plot[data-figure]'),n=plots.length,done=0;
function box(el){var r=el.getBoundingClientRect();return r.width>0&&r.height>0?r:null;}
function meets(a,b){return a.left<b.right&&b.left<a.right&&a.top<b.bottom&&b.top<a.bottom;}
function checkTitles(){var hit=[];plots.forEach(function(div){
var bar=div.querySelector('.modebar');var m=bar?box(bar):null;
var texts=Array.prototype.slice.call(div.querySelectorAll('.gtitle,.annotation-text'));
var h=div.parentElement.querySelector('h4.fig-title');if(h){texts.push(h);}
texts.forEach(function(t){var r=box(t);if(r&&m&&meets(r,m)){
hit.push(div.id);}});});
document.body.setAttribute('data-title-overlaps',hit.join(' '));
document.body.setAttribute('data-modebars',document.querySelectorAll('.modebar').length);}
function finished(){done++;if(done===n){markVerdict();checkTitles();
document.body.setAttribute('data-plots-ready',n);}}
if(n===0){document.body.setAttribute('data-plots-ready',0);}
plots.forEach(function(div){
const spec=JSON.parse(document.getElementById(div.dataset.figure).textContent);
Plotly.newPlot(div,spec.data,spec.layout,{responsive:true,displaylogo:false})
.then(finished).catch(function(err){document.body.setAttribute('data-js-error',String(err));});
});
"""

#: The scaling study's page in a report's directory (``syncpace demo`` writes both).
SCALING_PAGE = "scaling.html"

_BUSBW_NOTE = (
    "busbw uses the nccl-tests factors (all-reduce 2(n-1)/n; all-gather, reduce-scatter, "
    "all-to-all (n-1)/n; broadcast, reduce, send/recv 1), which assume a flat topology: on "
    "hierarchical fabrics compare like with like."
)

e = html.escape


def _safe_json(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def what_if_html(analysis: Analysis) -> str:
    """The what-if tables: each counterfactual's predicted iteration and saving."""
    parts = []
    names = fmt.run_names([r.run for r in analysis.runs])
    for run, table in zip(analysis.runs, analysis.what_if, strict=False):
        if table is None:
            continue
        b = table.base
        rows = "".join(
            f"<tr><td>{e(r.description)}</td><td>{e(fmt.duration_ns(r.iteration_ns))}</td>"
            f"<td>{e(fmt.duration_ns(r.saving_ns))}</td><td>{e(fmt.percent(r.saving))}</td>"
            f"<td>± {e(fmt.percent(r.error))}</td></tr>"
            for r in table.rows
        )
        parts.append(
            f"<p class='meta'>{e(names[run.run])}: measured "
            f"{e(fmt.duration_ns(b.measured_ns))} per iteration, plain replay "
            f"{e(fmt.duration_ns(b.replayed_ns))} ({e(fmt.signed_percent(b.error))})</p>"
            "<table class='ev what-if'><thead><tr><th>what if</th><th>iteration</th>"
            f"<th>saved</th><th>share</th><th>error</th></tr></thead><tbody>{rows}</tbody>"
            "</table>"
        )
    if not parts:
        return ""
    return '<section id="what-if"><h2>What if</h2>' + "".join(parts) + "</section>"


class _Figures:
    """Collects figures as they are placed: a container now, the JSON at the end.

    A figure's title is taken out of the plot into a heading above it, so plotly's
    toolbar (top right of the plot) never covers it, and its note (``layout.meta
    ["note"]``: what was left out and why) goes below it. A figure placed a second
    time (two findings resting on the same picture) is not drawn again: a link points
    to where it already is."""

    def __init__(self) -> None:
        self.scripts: list[str] = []
        self._placed: dict[str, tuple[int, str]] = {}  # figure JSON -> (index, title)

    def place(self, fig: Any, small: bool = False, title: str | None = None) -> str:
        text = fig.layout.title.text or title or ""
        meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
        note = str(meta.get("note") or "")
        key = fig.to_json()
        if key in self._placed:
            i, first = self._placed[key]
            return (
                f'<p class="same-plot" data-plot="plot-{i}">{e(_plain(first))}: the same plot '
                f'as <a href="#plot-{i}">above</a>.</p>'
            )
        # the title is drawn as a heading: the plot keeps only a margin for its toolbar
        # and the subplot titles, which sit just above the plot area
        top = 56 if fig.layout.annotations else 32
        fig.update_layout(title_text="", margin={"t": top})
        i = len(self.scripts)
        self._placed[key] = (i, text)
        self.scripts.append(
            f'<script type="application/json" id="fig-{i}">{_safe_json(fig.to_json())}</script>'
        )
        cls = "plot small" if small else "plot"
        height = fig.layout.height or (300 if small else 420)
        heading = f'<h4 class="fig-title">{e(_plain(text))}</h4>' if text else ""
        caption = f'<p class="fig-note">{e(note)}</p>' if note else ""
        return (
            f'<figure class="fig">{heading}<div class="{cls}" id="plot-{i}" '
            f'data-figure="fig-{i}" style="min-height:{int(height)}px"></div>{caption}</figure>'
        )


def _plain(title: str) -> str:
    """A figure title as text: figures escape trace strings for plotly's HTML subset."""
    return html.unescape(re.sub(r"<[^>]+>", " ", title)).strip()


# --------------------------------------------------------------------------- verdict


def _cause_html(c: Cause) -> str:
    return (
        f'<li class="cause" data-mode="{e(c.mode)}"><span class="title">{e(c.title)}</span> — '
        f'<span class="cost">{e(c.cost)}</span>'
        f'<div class="facts"><b>Where:</b> {e(c.where)} &nbsp;·&nbsp; <b>How sure:</b> '
        f"{e(c.sure)}</div>"
        f'<div class="why">{e(c.summary)}</div></li>'
    )


def verdict_html(v: Verdict, scaling_page: str | None = None) -> str:
    worst = max((c.severity for c in v.causes), default=None)
    cls = str(worst) if worst is not None else "healthy"
    parts = [
        f'<section id="verdict" class="verdict {e(cls)}">',
        f"<h2>Verdict: {e(v.headline)}</h2>",
        '<p class="timing">' + "<br>".join(e(t) for t in v.timing) + "</p>",
    ]
    if v.causes:
        parts.append("<ol>" + "".join(_cause_html(c) for c in v.causes) + "</ol>")
    if v.also:
        also = "; ".join(f"{c.title} — {c.where}, {c.cost}" for c in v.also)
        parts.append(f'<p class="also"><b>Also found:</b> {e(also)}</p>')
    if v.costs:
        items = "<br>".join(e(c) for c in v.costs)
        parts.append(f'<p class="costs"><b>Costs:</b> {items}</p>')
    parts.append(f'<p class="do"><b>Do first:</b> {e(v.first_action)}</p>')
    if v.quality:
        items = "<br>".join(e(q) for q in v.quality)
        parts.append(f'<p class="quality"><b>Data quality:</b> {items}</p>')
    parts.append(f'<p class="trust meta">Data: {e(v.trust)}</p>')
    parts.append(
        '<p class="nav"><a href="#findings">findings and evidence</a>'
        '<a href="#runs">runs side by side</a><a href="#timeline">timeline of iterations</a>'
        '<a href="#overview">all plots</a>'
        + (
            f'<a class="scaling-link" href="{e(scaling_page)}">scaling study (simulated)</a>'
            if scaling_page
            else ""
        )
        + "</p></section>"
    )
    return "".join(parts)


# --------------------------------------------------------------------------- runs


def runs_html(
    analysis: Analysis,
    figures: _Figures,
    iteration_plot: Any = None,
    paths: dict[str, str] | None = None,
) -> str:
    names = fmt.run_names([r.run for r in analysis.runs])
    paths = paths or names
    changes = {c.run: c for c in analysis.comparison}
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, cells: Sequence[str]) -> None:
        rows.append((label, list(cells)))

    runs = analysis.runs
    row("directory", [paths.get(r.run, names[r.run]) for r in runs])
    row("ranks", [_ranks_hosts(r) for r in runs])
    row("source", [r.source for r in runs])
    row("iterations measured", [fmt.count(r.iteration.get("count", 0)) for r in runs])
    row("iteration time, mean", [fmt.duration_ns(r.iteration_ns) for r in runs])
    row("iteration time, median", [fmt.duration_ns(r.iteration.get("p50", 0)) for r in runs])
    row("iteration time, p99", [fmt.duration_ns(r.iteration.get("p99", 0)) for r in runs])
    row("iteration-time CV", [fmt.number(r.iteration.get("cv", 0)) for r in runs])
    row(
        "throughput",
        [
            f"{fmt.number(1e9 / r.iteration_ns)} iterations/s" if r.iteration_ns else "—"
            for r in runs
        ],
    )
    if changes:
        row("change against the baseline", [_change(changes.get(r.run), names) for r in runs])
        row("waiting for the last rank", [fmt.percent(changes[r.run].wait_share) for r in runs])
    row("network busy", [fmt.percent(r.comm.get("network_share", 0)) for r in runs])
    row("communication exposed", [fmt.percent(r.comm.get("exposed_share", 0)) for r in runs])
    row("parallelism", [r.parallelism.describe() for r in runs])
    row("clock of the figures", [_time_base(r) for r in runs])
    row("after the last iteration", [fmt.trailing_line(r.trailing) for r in runs])
    row("other kinds of iteration", [fmt.other_kinds_text(r.other_kinds) for r in runs])
    row("pacing", [fmt.pacing_line(r.pacing) if r.pacing else "off" for r in runs])
    head = "".join(f"<th>{e(names[r.run])}</th>" for r in runs)
    body = "".join(
        f"<tr><th>{e(label)}</th>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>"
        for label, cells in rows
    )
    kind = {
        "single": "One run.",
        "comparison": f"{len(runs)} runs of one world size, compared with the first "
        f"({names[runs[0].run]}) as the baseline.",
        "scaling": f"{len(runs)} runs of {len({r.world_size for r in runs})} world sizes: "
        "a scaling study (see the scaling plot).",
        "separate": analysis.relation,
    }[analysis.study]
    table = (
        f'<table class="t runs"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody>'
        "</table>"
    )
    plot = figures.place(iteration_plot) if iteration_plot is not None else ""
    return (
        f'<section id="runs"><h2>Runs side by side</h2><p class="meta">{e(kind)}</p>'
        f'<div class="runs-grid"><div>{table}</div><div>{plot}</div></div></section>'
    )


def _time_base(run: RunMetrics) -> str:
    return fmt.time_base_line(run.time_base, run.per_rank, fmt.Places.of(run.placement))


def _ranks_hosts(run: RunMetrics) -> str:
    hosts = run.placement["node"].unique().sort().to_list()
    missing = f", {len(run.missing_ranks)} without a trace" if run.missing_ranks else ""
    return f"{run.world_size} on {len(hosts)} hosts ({fmt.names(hosts)}){missing}"


def _change(c: RunComparison | None, names: dict[str, str]) -> str:
    if c is None or c.iteration_change is None or c.baseline is None:
        return "baseline"
    faster = "faster" if c.iteration_change < 0 else "slower"
    return (
        f"{fmt.signed_percent(c.iteration_change)} iteration time "
        f"({fmt.percent(abs(c.iteration_change))} {faster} than {names[c.baseline]})"
    )


# --------------------------------------------------------------------------- whole run


def whole_run_html(analysis: Analysis, figures: _Figures) -> str:
    """Per run with per-step summaries (always-on mode): the whole run's figure, its
    detections and the steps with full detail. Empty when no run has summaries."""
    runs = [r for r in analysis.runs if r.whole_run is not None]
    if not runs:
        return ""
    # plotly is the optional [report] extra: the figure module imports it at its top.
    from syncpace.report.wholerun import whole_run_figure

    names = fmt.run_names([r.run for r in analysis.runs])
    parts = [
        '<section id="whole-run"><h2>The whole run</h2><p class="meta">From the per-step '
        "summaries every rank keeps for the whole run (always-on mode); the rest of the "
        "report covers the steps with full detail. Steps are grouped in bins of a power of "
        f"two steps, the fewest that leave at most {MAX_POINTS} points: each point is a "
        "bin, the band runs from the fastest to the slowest rank's mean step time in it, "
        "the line is the median rank's, the dotted line the slowest single step.</p>"
    ]
    for run in runs:
        w = run.whole_run
        assert w is not None
        places = fmt.Places.of(run.placement)
        detail = ",".join(f"{a}-{b}" for a, b in w.full_detail)
        rows = "".join(
            f'<tr class="detection" data-kind="{e(d.kind)}" '
            f'data-rank="{"" if d.rank is None else d.rank}" data-start="{d.start_step}" '
            f'data-detected="{"" if d.detected_step is None else d.detected_step}" '
            f'data-stop="{"" if d.stop_step is None else d.stop_step}">'
            f"<td>{e(fmt.detection_title(d.kind, d.rank, places))}</td>"
            f'<td class="num">{d.start_step}</td>'
            f'<td class="num">{"—" if d.detected_step is None else d.detected_step}</td>'
            f'<td class="num">{"still on" if d.stop_step is None else d.stop_step}</td>'
            f'<td class="num">{e(fmt.percent(d.episode_cost))}'
            "</td></tr>"
            for d in w.detections
        )
        table = (
            '<table class="t detections"><thead><tr><th>live detection</th><th>from step</th>'
            "<th>detected at</th><th>over at</th><th>cost</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            if w.detections
            else '<p class="meta">The live monitor reported nothing.</p>'
        )
        title = names[run.run] if len(analysis.runs) > 1 else ""
        parts.append(
            f'<div class="whole-run" data-run="{e(names[run.run])}" data-steps="{w.steps}" '
            f'data-summarised="{w.summarised}" data-full-detail="{e(detail)}" '
            f'data-full-detail-steps="{w.full_detail_steps}" data-bin-steps="{w.bin_steps}" '
            f'data-detections="{len(w.detections)}">'
            f'<p class="line">{e(fmt.whole_run_line(w, places))}</p>'
            f"{figures.place(whole_run_figure(w, places, title=title))}{table}</div>"
        )
    parts.append("</section>")
    return "".join(parts)


# --------------------------------------------------------------------------- findings


def _finding_card(
    analysis: Analysis, m: MergedFinding, index: int, figures: _Figures, make_figures: Any
) -> str:
    names = fmt.run_names([r.run for r in analysis.runs])
    places = {r.run: fmt.Places.of(r.placement) for r in analysis.runs}
    cols = [(run, f) for run, f in m.per_run]
    multi = len(cols) > 1
    head = (
        "".join(f"<th>{e(names.get(run, run))}</th>" for run, _ in cols) if multi else "<th></th>"
    )

    def cells(values: list[str | None]) -> str:
        # a value not measured in a run is an empty cell, never a row of dashes
        return "".join(f"<td>{e(v)}</td>" if v is not None else "<td></td>" for v in values)

    def per_run(fn: Any) -> list[str | None]:
        return [fn(f, places.get(run)) if f is not None else "not found" for run, f in cols]

    rows = [
        ("cost", per_run(lambda f, _: cost_text(f))),
        ("severity", per_run(lambda f, _: str(f.severity))),
        ("how sure", per_run(lambda f, _: fmt.confidence(f.confidence))),
        ("where", per_run(lambda f, p: fmt.where(f.ranks, f.nodes, p or fmt.Places({}, {})))),
    ]
    if any(f.source for f in m.found):  # what causes it, before who suffers
        rows.insert(3, ("caused by", per_run(lambda f, _: ", ".join(f.source) or None)))
    keys: list[str] = []
    for f in m.found:
        keys += [k for k in f.evidence if k not in keys]
    shown = {tuple(v) for _, v in rows}
    for key in keys:
        values = [
            _evidence(key, f.evidence.get(key), places.get(run)) if f is not None else None
            for run, f in cols
        ]
        # the same figures under another name (a median and its alias) are shown once
        if any(v is not None for v in values) and tuple(values) not in shown:
            shown.add(tuple(values))
            rows.append((_evidence_label(key), values))
    table = (
        f'<table class="t ev"><thead><tr><th></th>{head}</tr></thead><tbody>'
        + "".join(f"<tr><th>{e(label)}</th>{cells(vals)}</tr>" for label, vals in rows)
        + "</tbody></table>"
    )
    first = m.first
    summary = (f"{e(names.get(first.run, first.run))}: " if multi else "") + e(first.summary)
    actions = "".join(f"<li>{e(a)}</li>" for a in m.first.actions)
    plots = "".join(figures.place(fig, small=True) for _, fig in make_figures(analysis, m))
    return (
        f'<div class="finding {e(str(m.severity))}" id="finding-{index}" data-mode="{e(m.mode)}">'
        f'<h3>{index}. {e(fmt.mode_title(m.mode))}<span class="sev">{e(str(m.severity))} · '
        f"{e(m.mode)}</span></h3>"
        f'<div class="card"><div><p class="summary">{summary}</p>{table}'
        f'<b>What to do</b><ul class="actions">{actions}</ul></div>'
        f'<div class="plots">{plots}</div></div></div>'
    )


def _evidence(key: str, v: Any, places: fmt.Places | None) -> str | None:
    """An evidence value in words; the replayed what-if of the finding as a sentence."""
    if key == "counterfactual" and isinstance(v, dict) and "iteration_ms" in v:
        what = str(v.get("description") or v.get("name") or "without it")
        saved = fmt.duration_ns(float(v.get("saving_ms") or 0) * 1e6)
        text = (
            f"{what}: {fmt.duration_ns(float(v['iteration_ms']) * 1e6)} per iteration, "
            f"{saved} saved"
        )
        error = v.get("error")
        return text + (f" (replay error ± {fmt.percent(abs(error))})" if error else "")
    return fmt.value(key, v, places)


def _evidence_label(key: str) -> str:
    return "replayed" if key == "counterfactual" else fmt.label(key)


# --------------------------------------------------------------------------- timeline


def timeline_html(
    analysis: Analysis,
    figures: _Figures,
    named: Sequence[int],
    paths: dict[str, str] | None = None,
) -> str:
    # plotly is the optional [report] extra: the timeline module imports it at its top.
    from syncpace.report.timeline import iteration_figure, perfetto_hint

    names = fmt.run_names([r.run for r in analysis.runs])
    runs = {r.run: r for r in analysis.runs}
    parts = [
        '<section id="timeline"><h2>Timeline of iterations</h2><p class="meta">Per rank: '
        "grey = compute and other work between calls, red = waiting for the last rank to "
        "arrive, coloured = a collective transferring (by op), gold = pacing delay. Calls "
        "in flight together take sub-rows.</p>"
    ]
    for sample in analysis.samples:
        run = runs.get(sample.run)
        if run is None or not sample.picks:
            continue
        places = fmt.Places.of(run.placement)
        figs = []
        for why, step in sample.picks:
            title = (
                f"{names[run.run]} — {why} iteration (step {step}, "
                f"{fmt.duration_ns(sample.step_time_ns(step))} from first start to last end)"
            )
            fig = iteration_figure(
                sample, step, places, title=title, named=named, origin_ns=origin_ns(run)
            )
            figs.append(figures.place(fig))
        parts.append(f'<div class="grid2">{"".join(figs)}</div>')
        where = (paths or names).get(run.run, names[run.run])
        parts.append(f'<p class="hint">{e(perfetto_hint(where, sample.picks[0][1]))}</p>')
    parts.append("</section>")
    return "".join(parts)


# --------------------------------------------------------------------------- page


#: Reader warnings listed per run in the page; the rest are counted.
MAX_WARNINGS = 50


def _completeness_html(run: RunMetrics, name: str) -> str:
    """Declared vs found per rank, and the reader's warnings: loss is never only in JSON."""
    q = run.quality
    lines = q.get("completeness_lines") or []
    warnings = q.get("warnings") or []
    if not lines and not warnings:
        return ""
    lossy = len(lines) > 1 or bool(warnings)
    items = "".join(f"<li>{e(line.strip())}</li>" for line in lines)
    items += "".join(f"<li class='warn'>warning: {e(w)}</li>" for w in warnings[:MAX_WARNINGS])
    if len(warnings) > MAX_WARNINGS:
        items += f"<li class='warn'>… and {len(warnings) - MAX_WARNINGS} more warnings</li>"
    state = "lossy" if lossy else "complete"
    return (
        f"<div class='completeness {state}' data-lossy='{int(lossy)}'>"
        f"<b>Data completeness — {e(name)}</b><ul>{items}</ul></div>"
    )


def render_html(
    analysis: Analysis,
    *,
    plotly_js: str | None = None,
    base: str | Path | None = None,
    scaling_page: str | None = None,
) -> str:
    """The page. ``plotly_js``: ``None`` inlines plotly.js (self-contained); a path makes
    the page load it from there instead (relative to the page: a bundle shared by the
    reports of one directory). ``base``: the page's directory, against which run
    directories are shown (relative; without it, by their short names): no absolute
    local path is written into a page that may be sent on. ``scaling_page``: a scaling
    study page beside the report (``scaling.html``), linked from it."""
    try:
        # plotly is the optional [report] extra: the figure modules import it at their top.
        from plotly.offline import get_plotlyjs

        from syncpace.report.breakdown_figure import step_bars
        from syncpace.report.figures import ITERATION_TIME, all_figures
        from syncpace.report.finding_figures import finding_figures
    except ImportError as exc:  # pragma: no cover - plotly is the [report] extra
        raise PlotlyMissing("the HTML report needs plotly: pip install 'syncpace[report]'") from exc
    merged = merge_findings(analysis)
    verdict = build_verdict(analysis, merged)
    figures = _Figures()
    overview, notes = all_figures(analysis)
    # the runs' iteration times, overlaid, stand beside the runs table
    iteration_plot = next((f for t, f in overview if t == ITERATION_TIME), None)
    overview = [(t, f) for t, f in overview if t != ITERATION_TIME]
    paths = _shown_paths(analysis, base)
    runs = runs_html(analysis, figures, iteration_plot, paths)
    cards = "".join(
        _finding_card(analysis, m, i, figures, finding_figures) for i, m in enumerate(merged, 1)
    )
    named = sorted({r for m in merged if m.is_cause for r in m.ranks})
    timeline = timeline_html(analysis, figures, named, paths)
    # two columns: runs side by side (all_figures puts each run's figure of a kind together)
    blocks = "".join(f"<div>{figures.place(f, title=t)}</div>" for t, f in overview)
    names = fmt.run_names([x.run for x in analysis.runs])
    run_list = ", ".join(
        f"{names[r.run]} ({r.world_size} ranks, {r.source})" for r in analysis.runs
    )
    return "".join(
        [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            f"<title>{e(page_title(analysis))}</title>",
            f"<style>{_CSS}</style><script>{_ERROR_HOOK}</script>",
            (
                f"<script>{get_plotlyjs()}</script>"
                if plotly_js is None
                else f'<script src="{e(plotly_js)}"></script>'
            ),
            # more than two runs: tables get the page's width, plots go below them
            "</head><body class='many'>" if len(analysis.runs) > 2 else "</head><body>",
            f"<h1>syncpace report</h1><p class='meta'>{e(_meta_line(analysis, run_list))}</p>",
            hang_html(hang) if (hang := stopped(analysis.findings)) is not None else "",
            verdict_html(verdict, scaling_page),
            *(_completeness_html(r, names[r.run]) for r in analysis.runs),
            runs,
            whole_run_html(analysis, figures),
            '<section id="findings"><h2>Findings</h2>',
            cards,
            "</section>",
            what_if_html(analysis),
            breakdown_html(analysis, figures.place, step_bars),
            timeline,
            f'<section id="overview"><h2>Overview</h2><div class="grid2">{blocks}</div>',
            "</section><footer>",
            f"<p class='meta'>{e(_BUSBW_NOTE)}</p>",
            *(f"<p class='meta'>{e(note)}</p>" for note in notes),
            "</footer>",
            *figures.scripts,
            f"<script>{_DRAW}</script>",
            "</body></html>",
        ]
    )


def write_html(
    analysis: Analysis,
    out: str | Path,
    *,
    shared_plotly: bool = False,
    scaling_page: str | None = None,
) -> Path:
    """Write the report to ``out``. With ``shared_plotly`` plotly.js is not inlined but
    written once beside it (``plotly-<version>.min.js``, kept when it is there already):
    reports written together into one directory share the 4.8 MB bundle, and each opens
    offline as long as the bundle stays beside it. Run directories are shown relative to
    ``out``'s directory; ``scaling_page`` (relative to it) is linked, by default the
    scaling study of that directory (``scaling.html``) when there is one."""
    path = Path(out)
    if scaling_page is None and (path.parent / SCALING_PAGE).is_file():
        scaling_page = SCALING_PAGE
    try:
        bundle = _shared_bundle(path.parent) if shared_plotly else None
        page = render_html(analysis, plotly_js=bundle, base=path.parent, scaling_page=scaling_page)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the report ({exc.strerror or exc})") from exc
    return path


def _shown_paths(analysis: Analysis, base: str | Path | None) -> dict[str, str]:
    """Each run directory as the page shows it: relative to the page's directory, or by
    its short name when the page has none."""
    names = fmt.run_names([r.run for r in analysis.runs])
    if base is None:
        return names
    return {run: os.path.relpath(os.path.abspath(run), os.path.abspath(base)) for run in names}


def _started(analysis: Analysis) -> str:
    """The UTC date and time the first run's first analysed iteration began ("" for a
    run whose clock is not the wall clock, such as a simulated one)."""
    starts = [r.rank_steps["start_ns"].min() for r in analysis.runs if r.rank_steps.height]
    first = min((int(t) for t in starts if isinstance(t, int)), default=0)
    if first < _YEAR_2000_NS:
        return ""
    return datetime.fromtimestamp(first / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


_YEAR_2000_NS = 946_684_800 * 10**9


def _meta_line(analysis: Analysis, run_list: str) -> str:
    when = _started(analysis)
    return " · ".join(
        [run_list, *([when] if when else []), f"syncpace {__version__}", f"time axes: {ORIGIN}"]
    )


def page_title(analysis: Analysis) -> str:
    """The browser tab's title: the runs' names and when the first began."""
    names = fmt.run_names([r.run for r in analysis.runs])
    runs = ", ".join(names[r.run] for r in analysis.runs[:3])
    if len(analysis.runs) > 3:
        runs += f" and {len(analysis.runs) - 3} more"
    when = _started(analysis)
    return f"{runs}{' — ' + when if when else ''} — syncpace report"


def _shared_bundle(directory: Path) -> str:
    # plotly is the optional [report] extra, imported where a report is written
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    name = f"plotly-{get_plotlyjs_version()}.min.js"
    bundle = directory / name
    if not bundle.exists():
        tmp = bundle.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(get_plotlyjs(), encoding="utf-8")
        tmp.replace(bundle)  # atomic: a concurrent writer never leaves half a bundle
    return name
