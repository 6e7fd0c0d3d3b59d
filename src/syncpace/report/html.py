"""One self-contained HTML report: plotly.js inlined, works offline.

Every string that comes from a trace (paths, host names, group names, evidence) is
escaped: in HTML with ``html.escape``, and inside the JSON the page embeds, ``<``, ``>``
and ``&`` are written as ``\\u003c`` ... so no value can close a ``<script>`` element.
The page records script errors on ``<body data-js-error>`` and sets
``data-plots-ready`` once every figure is drawn (the browser test reads both).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from syncpace import __version__
from syncpace.analysis import Analysis, Finding
from syncpace.errors import PlotlyMissing, ReportError
from syncpace.report.terminal import pacing_line

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;max-width:1400px;color:#222}
h1{font-size:22px} h2{font-size:18px;margin-top:32px}
.finding{border-left:6px solid #888;padding:8px 14px;margin:10px 0;background:#fafafa}
.critical{border-color:#c62828}.warning{border-color:#f9a825}.info{border-color:#2e7d32}
table.ev{border-collapse:collapse;font-size:13px;margin:6px 0}
table.ev td{border:1px solid #ddd;padding:2px 8px;vertical-align:top}
.meta{color:#666;font-size:13px}.plot{min-height:420px}
"""

_ERROR_HOOK = """
window.onerror=function(msg){document.body.setAttribute('data-js-error',String(msg));};
"""


def _safe_json(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _finding_html(f: Finding, index: int) -> str:
    e = html.escape
    where = []
    if f.ranks:
        where.append("ranks " + e(", ".join(map(str, f.ranks))))
    if f.nodes:
        where.append("nodes " + e(", ".join(f.nodes)))
    rows = "".join(
        f"<tr><td>{e(str(k))}</td><td>{e(json.dumps(v, default=str))}</td></tr>"
        for k, v in f.evidence.items()
    )
    actions = "".join(f"<li>{e(a)}</li>" for a in f.actions)
    return (
        f'<div class="finding {e(str(f.severity))}" id="finding-{index}">'
        f"<b>{index}. {e(f.mode)}</b> — {e(str(f.severity))}, cost {f.cost:.1%} of the "
        f"iteration{_cost_note(f)}, confidence {f.confidence:.2f}"
        f"{' — ' + '; '.join(where) if where else ''}"
        f'<div>{e(f.summary)}</div><div class="meta">run: {e(f.run)}</div>'
        f'<table class="ev">{rows}</table><ul>{actions}</ul></div>'
    )


def _cost_note(f: Finding) -> str:
    if f.cost_basis != "replay" or f.cost_error is None:
        return ""
    return f" (±{f.cost_error:.1%}, saved in a replay without it)"


def what_if_html(analysis: Analysis) -> str:
    """The what-if tables: each counterfactual's predicted iteration and saving."""
    e = html.escape
    parts = []
    for run, table in zip(analysis.runs, analysis.what_if, strict=False):
        if table is None:
            continue
        b = table.base
        rows = "".join(
            f"<tr><td>{e(r.description)}</td><td>{r.iteration_ns / 1e6:.2f}</td>"
            f"<td>{r.saving_ns / 1e6:.2f}</td><td>{r.saving:.1%}</td><td>±{r.error:.1%}</td></tr>"
            for r in table.rows
        )
        parts.append(
            f"<p class='meta'>{e(run.run)}: measured {b.measured_ns / 1e6:.2f} ms per "
            f"iteration, plain replay {b.replayed_ns / 1e6:.2f} ms ({b.error:+.2%})</p>"
            "<table class='ev what-if'><tr><td>what if</td><td>iteration ms</td>"
            f"<td>saved ms</td><td>saved</td><td>error</td></tr>{rows}</table>"
        )
    if not parts:
        return ""
    return "<h2>What if</h2>" + "".join(parts)


def render_html(analysis: Analysis) -> str:
    try:
        # plotly is the optional [report] extra: the figures import it at their top.
        from plotly.offline import get_plotlyjs

        from syncpace.report.figures import all_figures
    except ImportError as exc:  # pragma: no cover - plotly is the [report] extra
        raise PlotlyMissing("the HTML report needs plotly: pip install 'syncpace[report]'") from exc
    e = html.escape
    figures, notes = all_figures(analysis)
    sections, scripts = [], []
    for i, (title, fig) in enumerate(figures):
        sections.append(f'<h2>{e(title)}</h2><div class="plot" id="plot-{i}"></div>')
        scripts.append(
            f'<script type="application/json" id="fig-{i}">{_safe_json(fig.to_json())}</script>'
        )
    runs = "".join(
        f"<li>{e(r.run)}: {r.world_size} ranks, source {e(r.source)}, iteration "
        f"{r.iteration_ns / 1e6:.2f} ms, CV {r.iteration.get('cv', 0):.3f}, network share "
        f"{r.comm.get('network_share', 0):.0%}"
        + (f"<br><span class='pacing'>{e(pacing_line(r.pacing))}</span>" if r.pacing else "")
        + "</li>"
        for r in analysis.runs
    )
    findings = "".join(_finding_html(f, i) for i, f in enumerate(analysis.findings, 1))
    draw = (
        f"var n={len(figures)},done=0;for(let i=0;i<n;i++){{"
        "const spec=JSON.parse(document.getElementById('fig-'+i).textContent);"
        "Plotly.newPlot('plot-'+i,spec.data,spec.layout,{responsive:true})"
        ".then(function(){done++;if(done===n){document.body.setAttribute('data-plots-ready',n);}})"
        ".catch(function(err){document.body.setAttribute('data-js-error',String(err));});}"
    )
    return "".join(
        [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            "<title>syncpace report</title>",
            f"<style>{_CSS}</style><script>{_ERROR_HOOK}</script>",
            f"<script>{get_plotlyjs()}</script></head><body>",
            f"<h1>syncpace report</h1><p class='meta'>syncpace {e(__version__)}</p>",
            f"<ul>{runs}</ul>",
            "<h2>Findings</h2>",
            findings,
            what_if_html(analysis),
            "<p class='meta'>busbw uses the nccl-tests factors (all-reduce 2(n-1)/n; "
            "all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1), "
            "which assume a flat topology: on hierarchical fabrics compare like with like.</p>",
            *(f"<p class='meta'>{e(note)}</p>" for note in notes),
            *sections,
            *scripts,
            f"<script>{draw}</script>",
            "</body></html>",
        ]
    )


def write_html(analysis: Analysis, out: str | Path) -> Path:
    path = Path(out)
    try:
        path.write_text(render_html(analysis), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the report ({exc.strerror or exc})") from exc
    return path
