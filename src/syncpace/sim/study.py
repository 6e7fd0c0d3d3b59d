"""Scaling study: the same job at several node counts, with and without pacing.

Weak scaling (the per-GPU batch is fixed): throughput = samples/s, speedup =
throughput / throughput at the smallest scale of the same arm, efficiency = speedup /
(nodes / smallest nodes). CV and p99 are of the global iteration time after warm-up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace.control.policy import PacingConfig
from syncpace.errors import ConfigError
from syncpace.sim.engine import SimConfig, SimResult, simulate

COLUMNS = (
    ("nodes", "nodes", "{:d}"),
    ("world_size", "ranks", "{:d}"),
    ("pacing", "pacing", "{}"),
    ("iteration_ms", "iter ms", "{:.1f}"),
    ("throughput", "samples/s", "{:,.0f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("efficiency", "efficiency", "{:.0%}"),
    ("cv", "CV", "{:.3f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
    ("comm_ms", "comm ms", "{:.1f}"),
    ("pacing_on_share", "pacer on", "{:.0%}"),
)


@dataclass(frozen=True)
class StudyResult:
    name: str
    rows: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.name, "rows": [dict(r) for r in self.rows]}

    def arm(self, paced: bool) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["pacing"] == paced]


def at_scale(config: SimConfig, nodes: int, pacing: PacingConfig | None) -> SimConfig:
    topo = config.topology
    cluster = max(topo.cluster_nodes, nodes) if topo.cluster_nodes else 0
    topo = dataclasses.replace(topo, nodes=nodes, cluster_nodes=cluster)
    return config.replace(topology=topo, pacing=pacing)


def run_study(
    config: SimConfig,
    nodes: Sequence[int],
    pacing: PacingConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    keep: Callable[[SimConfig, SimResult], None] | None = None,
) -> StudyResult:
    """Simulate every scale without pacing, and with ``pacing`` when given."""
    scales = sorted(set(nodes))
    if not scales:
        raise ConfigError("a scaling study needs at least one node count")
    arms: list[PacingConfig | None] = [None] + ([pacing] if pacing is not None else [])
    rows: list[dict[str, Any]] = []
    for arm in arms:
        base = None
        for n in scales:
            cfg = at_scale(config, n, arm)
            if progress is not None:
                progress(f"{n} nodes{' paced' if arm else ''}")
            result = simulate(cfg)
            if keep is not None:
                keep(cfg, result)
            s = result.summary()
            base = base or s
            speedup = s["throughput"] / base["throughput"]
            rows.append(
                {
                    **s,
                    "pacing": arm is not None,
                    "speedup": speedup,
                    "efficiency": speedup / (n / base["nodes"]),
                }
            )
    if pacing is not None:
        plain = {r["nodes"]: r for r in rows if not r["pacing"]}
        for r in rows:
            ref = plain[r["nodes"]]
            r["pacing_gain"] = r["throughput"] / ref["throughput"] - 1 if r["pacing"] else 0.0
    return StudyResult(config.name, tuple(rows))


def render(study: StudyResult) -> Any:
    from rich.table import Table

    table = Table(title=f"scaling study: {study.name}")
    for _, title, _ in COLUMNS:
        table.add_column(title, justify="right")
    if any("pacing_gain" in r for r in study.rows):
        table.add_column("pacing gain", justify="right")
    for r in study.rows:
        cells = [
            fmt.format(r[key]) if key != "pacing" else ("on" if r[key] else "off")
            for key, _, fmt in COLUMNS
        ]
        if "pacing_gain" in r:
            cells.append(f"{r['pacing_gain']:+.1%}" if r["pacing"] else "")
        table.add_row(*cells)
    return table


def plot(study: StudyResult, path: str | Path) -> Path:
    """A self-contained HTML figure: throughput (with the linear ideal) and CV by scale."""
    try:
        from plotly.subplots import make_subplots
    except ImportError as exc:
        raise ConfigError("--plot needs plotly (pip install 'syncpace[report]')") from exc
    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput (samples/s)", "iteration CV"))
    for paced in (False, True):
        rows = study.arm(paced)
        if not rows:
            continue
        label = "pacing on" if paced else "pacing off"
        x = [r["nodes"] for r in rows]
        fig.add_scatter(x=x, y=[r["throughput"] for r in rows], name=label, row=1, col=1)
        fig.add_scatter(x=x, y=[r["cv"] for r in rows], name=f"CV, {label}", row=1, col=2)
    base = study.arm(False)
    if base:
        x = [r["nodes"] for r in base]
        ideal = [base[0]["throughput"] * n / base[0]["nodes"] for n in x]
        fig.add_scatter(x=x, y=ideal, name="linear", line={"dash": "dot"}, row=1, col=1)
    fig.update_xaxes(type="log", title_text="nodes")
    fig.update_layout(title=f"syncpace simulate: {study.name}")
    out = Path(path)
    fig.write_html(out, include_plotlyjs=True, full_html=True)
    return out
