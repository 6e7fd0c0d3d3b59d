"""Scaling study: the same job at several node counts, with and without pacing.

Every scale runs unpaced and, when the configuration's pacer has a strategy, paced as
well: the same pacer (policy, lag, A/B guard) a live run uses, so the paced arm is
what a user would get, A/B probing included. A study may run one paced arm per place of
the pacer's delay (``placements``: ``device``, the kernel the tracer puts on the stream
on a GPU, and ``host``, a sleep), so it shows what a host-side delay would have done;
every paced row's ``pacing_gain`` is against the unpaced row of its scale.

Weak scaling (the per-GPU batch is fixed): throughput = samples/s, speedup = throughput
/ throughput at the smallest scale of the same arm, efficiency = speedup / (nodes /
smallest nodes). CV and p99 are of the global iteration time after warm-up.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncpace.errors import ConfigError
from syncpace.sim.engine import SimConfig, SimResult, simulate
from syncpace.sim.workload import PLACEMENTS

COLUMNS = (
    ("nodes", "nodes", "{:d}"),
    ("world_size", "ranks", "{:d}"),
    ("pacing_on", "pacing", "{}"),
    ("iteration_ms", "iter ms", "{:.1f}"),
    ("throughput", "samples/s", "{:,.0f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("efficiency", "efficiency", "{:.0%}"),
    ("cv", "CV", "{:.3f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
    ("comm_ms", "comm ms", "{:.1f}"),
    ("pacing_on_share", "pacer on", "{:.0%}"),
    ("run_ahead_ms", "run-ahead ms", "{:.1f}"),
)


@dataclass(frozen=True)
class StudyResult:
    name: str
    rows: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.name, "rows": [dict(r) for r in self.rows]}

    def arm(self, paced: bool, pacing_on: str | None = None) -> list[dict[str, Any]]:
        """The rows of one arm: unpaced, or paced (with the delay ``pacing_on``, when
        given; every paced arm otherwise)."""
        return [
            r
            for r in self.rows
            if r["pacing"] == paced and (pacing_on is None or r["pacing_on"] == pacing_on)
        ]


def at_scale(config: SimConfig, nodes: int) -> SimConfig:
    topo = config.topology
    cluster = max(topo.cluster_nodes, nodes) if topo.cluster_nodes else 0
    return config.replace(topology=dataclasses.replace(topo, nodes=nodes, cluster_nodes=cluster))


def arms(config: SimConfig, placements: Sequence[str] = ()) -> list[SimConfig]:
    """The unpaced configuration and, when ``config`` paces, one paced configuration per
    place of the delay in ``placements`` (default: the workload's ``pacing_on``)."""
    off = config.replace(pacing=dataclasses.replace(config.pacing, strategy="off"))
    if not config.pacing.paced:
        return [off]
    places = list(dict.fromkeys(placements)) or [config.workload.pacing_on]
    unknown = sorted(set(places) - set(PLACEMENTS))
    if unknown:
        raise ConfigError(f"pacing_on: must be one of {', '.join(PLACEMENTS)}, got {unknown}")
    paced = [
        config.replace(workload=dataclasses.replace(config.workload, pacing_on=place))
        for place in places
    ]
    return [off, *paced]


def arm_name(config: SimConfig) -> str:
    """``off``, or where the paced arm's delay goes (``device``, ``host``)."""
    return config.workload.pacing_on if config.pacing.paced else "off"


def run_study(
    config: SimConfig,
    nodes: Sequence[int],
    *,
    placements: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    keep: Callable[[SimConfig, SimResult], None] | None = None,
) -> StudyResult:
    """Simulate every scale without pacing, and with ``config``'s pacer when it paces:
    once per place of its delay in ``placements`` (default: the workload's)."""
    scales = sorted(set(nodes))
    if not scales:
        raise ConfigError("a scaling study needs at least one node count")
    rows: list[dict[str, Any]] = []
    for arm in arms(config, placements):
        base = None
        paced = arm.pacing.paced
        for n in scales:
            cfg = at_scale(arm, n)
            if progress is not None:
                progress(f"{n} nodes{f' paced on the {arm_name(arm)}' if paced else ''}")
            result = simulate(cfg)
            if keep is not None:
                keep(cfg, result)
            s = result.summary()
            base = base or s
            speedup = s["throughput"] / base["throughput"]
            rows.append(
                {
                    **s,
                    "pacing": paced,
                    "pacing_on": arm_name(arm),
                    "ab_state": result.ab_state,
                    "speedup": speedup,
                    "efficiency": speedup / (n / base["nodes"]),
                }
            )
    if config.pacing.paced:
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
    paced = any(r["pacing"] for r in study.rows)
    if paced:
        table.add_column("A/B", justify="right")
        table.add_column("pacing gain", justify="right")
    for r in study.rows:
        cells = [fmt.format(r[key]) for key, _, fmt in COLUMNS]
        if paced:
            cells.append((r["ab_state"] or "") if r["pacing"] else "")
            cells.append(f"{r['pacing_gain']:+.1%}" if r["pacing"] else "")
        table.add_row(*cells)
    return table


def withheld_page(path: str | Path, name: str, lines: Sequence[str]) -> Path:
    """The scaling page when predictions are withheld: the check and why, no figure."""
    body = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    title = html.escape(f"syncpace simulate: {name}")
    out = Path(path)
    out.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><h1>{title}</h1>{body}</body></html>\n",
        encoding="utf-8",
    )
    return out
