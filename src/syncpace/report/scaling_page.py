"""The scaling study as a page (``scaling.html``): what was simulated, the efficiency at
every scale, the measured point beside the predicted one with its error, and two plots
whose axes say their scale.

Written by ``syncpace demo`` (beside its report, which links it) and by ``syncpace
simulate --plot``. It takes the study's rows as plain mappings (``nodes``,
``world_size``, ``pacing``, ``pacing_on``, ``iteration_ms``, ``throughput``,
``speedup``, ``efficiency``, ``cv`` and, for paced rows, ``pacing_gain``), so the report
layer needs nothing of the simulator. Like the report it is self-contained, escapes
every string and marks ``data-plots-ready`` and ``data-title-overlaps`` for the browser
test.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace import __version__
from syncpace.errors import PlotlyMissing, ReportError
from syncpace.report import format as fmt
from syncpace.report.html import _CSS, _DRAW, _ERROR_HOOK, _Figures

e = html.escape
Row = Mapping[str, Any]


@dataclass(frozen=True)
class Measured:
    """What a traced run measured at one scale: the point the simulation is checked on."""

    nodes: int
    iteration_ms: float
    run: str

    def error(self, rows: Sequence[Row]) -> tuple[Row, float] | None:
        """The unpaced predicted row at this scale and its error against the measure
        (predicted / measured - 1); ``None`` without one."""
        row = next((r for r in rows if not r["pacing"] and r["nodes"] == self.nodes), None)
        if row is None or self.iteration_ms <= 0:
            return None
        return row, row["iteration_ms"] / self.iteration_ms - 1


def _arms(rows: Sequence[Row]) -> dict[str, list[Row]]:
    arms: dict[str, list[Row]] = {}
    for r in rows:
        arms.setdefault(str(r.get("pacing_on", "off")), []).append(r)
    return arms


def _label(arm: str) -> str:
    return "pacing off" if arm == "off" else f"pacing on the {arm}"


def _check_html(rows: Sequence[Row], measured: Measured | None) -> str:
    if measured is None:
        return (
            "<p class='check' data-error=''>No traced run to check the model against: "
            "every figure below is a prediction.</p>"
        )
    found = measured.error(rows)
    if found is None:
        return (
            f"<p class='check' data-error=''>The traced run ({e(measured.run)}) ran at "
            f"{measured.nodes} nodes, a scale the study did not simulate.</p>"
        )
    row, error = found
    return (
        f"<p class='check' data-error='{error:.4f}' data-measured-ms='{measured.iteration_ms:.3f}'"
        f" data-predicted-ms='{row['iteration_ms']:.3f}'><b>Measured beside predicted:</b> at "
        f"{measured.nodes} nodes the traced run ({e(measured.run)}) took "
        f"{e(fmt.duration_ns(measured.iteration_ms * 1e6))} per iteration; the simulation "
        f"predicts {e(fmt.duration_ns(row['iteration_ms'] * 1e6))} "
        f"({e(fmt.signed_percent(error))}). Larger scales are predictions from that "
        "model.</p>"
    )


def _table(rows: Sequence[Row]) -> str:
    paced = any(r["pacing"] for r in rows)
    head = (
        "<tr><th>nodes</th><th>ranks</th><th>pacing</th><th>iteration</th>"
        "<th>samples/s</th><th>speedup</th><th>efficiency</th><th>iteration CV</th>"
        + ("<th>pacing gain</th>" if paced else "")
        + "</tr>"
    )
    body = "".join(
        f"<tr><td class='num'>{r['nodes']}</td><td class='num'>{r.get('world_size', '')}</td>"
        f"<td>{e(_label(str(r.get('pacing_on', 'off'))))}</td>"
        f"<td class='num'>{e(fmt.duration_ns(r['iteration_ms'] * 1e6))}</td>"
        f"<td class='num'>{r['throughput']:,.0f}</td>"
        f"<td class='num'>{r['speedup']:.2f}×</td>"
        f"<td class='num'>{e(fmt.percent(r['efficiency']))}</td>"
        f"<td class='num'>{r['cv']:.3f}</td>"
        + (
            f"<td class='num'>{e(fmt.signed_percent(r.get('pacing_gain', 0.0)))}</td>"
            if paced and r["pacing"]
            else ("<td></td>" if paced else "")
        )
        + "</tr>"
        for r in rows
    )
    return f"<table class='t study'><thead>{head}</thead><tbody>{body}</tbody></table>"


def _figures(rows: Sequence[Row], measured: Measured | None) -> list[Any]:
    import plotly.graph_objects as go  # the [report] extra, loaded only to draw

    arms = _arms(rows)
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    through = go.Figure()
    eff = go.Figure()
    for i, (arm, part) in enumerate(arms.items()):
        x = [r["nodes"] for r in part]
        line = {"color": colours[i % len(colours)]}
        through.add_scatter(
            x=x,
            y=[r["throughput"] for r in part],
            mode="lines+markers",
            name=_label(arm),
            line=line,
        )
        eff.add_scatter(
            x=x,
            y=[r["efficiency"] * 100 for r in part],
            mode="lines+markers",
            name=_label(arm),
            line=line,
        )
    base = arms.get("off") or next(iter(arms.values()), [])
    if base:
        x = [r["nodes"] for r in base]
        ideal = [base[0]["throughput"] * n / base[0]["nodes"] for n in x]
        through.add_scatter(
            x=x, y=ideal, mode="lines", name="linear (ideal)", line={"dash": "dot", "color": "#777"}
        )
        eff.add_hline(y=100, line_dash="dot", line_color="#777", annotation_text="ideal")
    found = measured.error(rows) if measured is not None else None
    if measured is not None and found is not None:
        row, error = found
        # the same samples per iteration as the predicted row: its throughput at the
        # measured iteration time
        samples = row["throughput"] * row["iteration_ms"] / 1e3
        through.add_scatter(
            x=[measured.nodes],
            y=[samples / (measured.iteration_ms / 1e3)],
            mode="markers",
            marker={"symbol": "diamond", "size": 13, "color": "#000"},
            name=html.escape(
                f"measured at {measured.nodes} nodes (prediction {fmt.signed_percent(error)})"
            ),
        )
    common = {"template": "plotly_white", "height": 420, "legend": {"orientation": "h", "y": -0.2}}
    through.update_layout(
        title="Throughput by scale, against linear scaling",
        xaxis={"type": "log", "title": "nodes (log scale)", "tickvals": [r["nodes"] for r in base]},
        yaxis={"type": "log", "title": "samples/s (log scale)"},
        **common,
    )
    eff.update_layout(
        title="Weak-scaling efficiency (throughput per node against the smallest scale)",
        xaxis={"type": "log", "title": "nodes (log scale)", "tickvals": [r["nodes"] for r in base]},
        yaxis={"title": "efficiency (%, linear scale)", "range": [0, 110]},
        **common,
    )
    return [through, eff]


def render_scaling_page(
    rows: Sequence[Row],
    *,
    name: str,
    simulated: Sequence[str],
    measured: Measured | None = None,
    report: str | None = None,
) -> str:
    """The page of a study's ``rows``; ``simulated``: what was simulated, one sentence
    each; ``measured``: the traced run the model is checked on; ``report``: the report
    of the traced runs, relative to this page, linked from it."""
    if not rows:
        raise ReportError("a scaling page needs at least one simulated scale")
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:  # pragma: no cover - plotly is the [report] extra
        raise PlotlyMissing(
            "the scaling page needs plotly: pip install 'syncpace[report]'"
        ) from exc
    figures = _Figures()
    plots = "".join(f"<div>{figures.place(f)}</div>" for f in _figures(rows, measured))
    base = [r for r in rows if not r["pacing"]] or list(rows)
    last = base[-1]
    summary = (
        f"At {last['nodes']} nodes the simulated job runs at "
        f"{fmt.percent(last['efficiency'])} weak-scaling efficiency of {base[0]['nodes']} "
        f"nodes ({e(fmt.duration_ns(last['iteration_ms'] * 1e6))} per iteration, iteration "
        f"CV {last['cv']:.3f})."
    )
    back = (
        f"<p class='nav'><a href='{e(report)}'>the report of the traced runs</a></p>"
        if report
        else ""
    )
    what = "".join(f"<li>{e(line)}</li>" for line in simulated)
    return "".join(
        [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            f"<title>{e(name)} — simulated scaling study — syncpace</title>",
            f"<style>{_CSS}</style><script>{_ERROR_HOOK}</script>",
            f"<script>{get_plotlyjs()}</script></head><body>",
            f"<h1>Scaling study (simulated): {e(name)}</h1>",
            f"<p class='meta'>syncpace {e(__version__)} · weak scaling: the per-GPU batch is "
            "fixed, speedup = throughput / throughput at the smallest scale, efficiency = "
            "speedup / (nodes / smallest nodes)</p>",
            back,
            f"<section id='simulated'><h2>What was simulated</h2><ul>{what}</ul></section>",
            f"<section id='result'><h2>Result</h2><p class='summary'>{summary}</p>",
            _check_html(rows, measured),
            f"<div class='grid2' id='plots'>{plots}</div>",
            f"<h3>Every scale</h3>{_table(rows)}</section>",
            *figures.scripts,
            f"<script>{_DRAW}</script>",
            "</body></html>",
        ]
    )


def write_scaling_page(
    rows: Sequence[Row],
    out: str | Path,
    *,
    name: str,
    simulated: Sequence[str],
    measured: Measured | None = None,
    report: str | None = None,
) -> Path:
    """Write :func:`render_scaling_page` to ``out``."""
    path = Path(out)
    page = render_scaling_page(
        rows, name=name, simulated=simulated, measured=measured, report=report
    )
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the scaling page ({exc.strerror or exc})") from exc
    return path
