"""The whole run of an always-on job as one figure (``analysis.wholerun``).

Three rows over the step axis, shared:

1. **step time** — the band from the fastest to the slowest rank's mean step time in
   each bin, the median rank as a line, the slowest single step of any rank dotted;
2. **blocked in collectives** — the median and the most blocked rank's mean time per
   step spent waiting on collectives;
3. **what is known of each step** — the steps with full event detail (the kept windows
   and the recent steps) and each live detection as a bar from its start to its stop
   (who, when), the first :data:`MAX_LANES` of them; the rest are counted in the title.

Detections are also shaded over rows 1 and 2. At most ``analysis.wholerun.MAX_POINTS``
points a line, whatever the run's length and world size.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from syncpace.analysis.wholerun import WholeRun
from syncpace.report import format as fmt

#: Detection bars drawn; more are counted in the title (the table lists them all).
MAX_LANES = 12
_DETAIL = "#2e7d32"
_KIND_COLOUR = {"straggler": "#c62828", "step_time_jump": "#ef6c00"}


def _ms(values: list[float | None]) -> list[float | None]:
    return [v / 1e6 if v is not None else None for v in values]


def whole_run_figure(w: WholeRun, places: fmt.Places, title: str = "") -> go.Figure:
    b = w.bins
    x = [(a + z) / 2 for a, z in zip(b["first_step"], b["last_step"], strict=True)]
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        row_heights=[0.45, 0.3, 0.25],
        subplot_titles=("step time", "blocked in collectives, per step", "detail and detections"),
    )
    per = "step" if w.bin_steps == 1 else f"{w.bin_steps} steps"
    lo, hi = _ms(b["step_ns_min"].to_list()), _ms(b["step_ns_max"].to_list())
    fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", line={"width": 0}, showlegend=False,
                             hoverinfo="skip", legendgroup="band"), row=1, col=1)  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=x,
            y=lo,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor="rgba(31,119,180,0.25)",
            name="fastest to slowest rank (mean)",
            legendgroup="band",
            hoverinfo="skip",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(x=x, y=_ms(b["step_ns_median"].to_list()), mode="lines",
                   line={"color": "#1f77b4"}, name="median rank",
                   hovertemplate="steps %{customdata}: %{y:.3g} ms<extra>median rank</extra>",
                   customdata=_spans(b)),
        row=1, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=x, y=_ms(b["step_ns_worst"].cast(float).to_list()), mode="lines",
                   line={"color": "#555", "dash": "dot", "width": 1},
                   name="slowest single step"),
        row=1, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=x, y=_ms(b["blocked_ns_median"].to_list()), mode="lines",
                   line={"color": "#d62728"}, name="blocked, median rank"),
        row=2, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=x, y=_ms(b["blocked_ns_max"].to_list()), mode="lines",
                   line={"color": "#d62728", "dash": "dot", "width": 1},
                   name="blocked, most blocked rank"),
        row=2, col=1,
    )  # fmt: skip
    lanes, ends, starts, colours, texts = [], [], [], [], []
    for a, z in w.full_detail:
        lanes.append("full detail")
        starts.append(a)
        ends.append(z - a + 1)
        colours.append(_DETAIL)
        texts.append(f"full event detail: steps {a}–{z}")
    shown = w.detections[:MAX_LANES]
    for d in shown:
        who = fmt.detection_title(d.kind, d.rank, places)
        stop = d.stop_step if d.stop_step is not None else w.last_step
        lanes.append(html.escape(who))
        starts.append(d.start_step)
        ends.append(max(stop - d.start_step + 1, 1))
        colours.append(_KIND_COLOUR.get(d.kind, "#6a1b9a"))
        texts.append(html.escape(f"{who} {fmt.detection_when(d)}"))
        for row in (1, 2):
            fig.add_vrect(x0=d.start_step, x1=stop, fillcolor=colours[-1], opacity=0.08,
                          line_width=0, row=row, col=1)  # fmt: skip
    fig.add_trace(
        go.Bar(
            y=lanes,
            x=ends,
            base=starts,
            orientation="h",
            marker={"color": colours},
            hovertext=texts,
            hoverinfo="text",
            showlegend=False,
            name="",
        ),
        row=3,
        col=1,
    )
    more = len(w.detections) - len(shown)
    heading = title or "The whole run"
    heading += f" — {fmt.count(w.summarised)} steps summarised, one point per {per}"
    if more > 0:
        heading += f"; {more} more detections in the table"
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(autorange="reversed", row=3, col=1)
    fig.update_xaxes(title_text="step", row=3, col=1)
    fig.update_layout(
        title={"text": html.escape(heading), "font": {"size": 14}},
        height=560 + 18 * max(0, len(set(lanes)) - 3),
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
        legend={"orientation": "h", "y": -0.12},
        barmode="overlay",
    )
    return fig


def _spans(b: pl.DataFrame) -> list[str]:
    pairs = zip(b["first_step"].to_list(), b["last_step"].to_list(), strict=True)
    return [f"{a}–{z}" if a != z else str(a) for a, z in pairs]
