"""The fast tiers checked against the packet tier: the same job through all three.

A data-parallel job of one GPU per node (one 10 Gbit/s NIC each) on a leaf-spine of 8
nodes per leaf and 4 spines, scattered over a cluster twice its size (so ring
neighbours sit on different leaves and cross the spines), one 4 MB ring all-reduce per
iteration after 15 ms of compute, no compute noise (the tiers then differ only in the
network). Per point (oversubscription x nodes x with or without a greedy TCP flow from
node 1 to node 0) each tier simulates the same run; the table gives each tier's
iteration time and communication per iteration, the fast tiers' error against the
packet tier, and each tier's wall and CPU seconds (ns-3's child processes included).

With the greedy flow the packet tier runs ``--samples`` offsets per collective after
``--settle`` + up to ``--span`` simulated seconds of the flow alone (the simulator's
defaults are 4, 1 s and 2 s: each simulated second of a 10 Gbit/s greedy flow is about
860,000 segments of ns-3 work). A packet point whose estimate exceeds ``--packet-budget``
CPU seconds is not run and says so.

    python benchmarks/tier_check.py --out runs/tier_check [--nodes 16,32,64]
        [--oversub 1,4] [--steps 20] [--samples 2] [--settle 0.2] [--span 0.2]

``--packet-from FILE`` takes the packet tier's rows from an earlier run's
``tier_check.json`` where it has the point, so a change to the fast tiers is measured
against the same ns-3 runs without running them again.

``--speed TIERS`` measures instead each tier's speed on the reference scenario
(examples/scenarios/reference_study.toml, ``--steps`` iterations, unpaced arm only):
nodes doubled from 4 until a run takes more than a minute of CPU (ns-3 included), with
the rate in the tier's own unit: rank-iterations per CPU second (analytical), the
job's coflows per CPU second (flow: each lockstep group of each phase of each
collective, other jobs' flows running beside them), TCP segments of the job per CPU
second (packet: intra-node phases once, as sent; the iterations do not matter, each
distinct collective runs once).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from rich.console import Console
from rich.progress import Progress

from syncpace.config import load_toml
from syncpace.sim.collectives import plan
from syncpace.sim.engine import SimConfig, simulate
from syncpace.sim.packet.net import HEADERS, forget
from syncpace.sim.packet.transfers import one_node
from syncpace.sim.scenario import from_dict, load
from syncpace.sim.tierpick import estimate_packet_cpu_s

TIERS = ("analytical", "flow", "packet")
REFERENCE = Path(__file__).resolve().parents[1] / "examples/scenarios/reference_study.toml"
JOB = REFERENCE.with_name("tier_check.toml")


def config(nodes: int, oversub: float, greedy: bool, tier: str, args: argparse.Namespace):
    """The cross-check's job (examples/scenarios/tier_check.toml) at one point: the
    nodes scattered over a cluster twice the job's size."""
    data = load_toml(JOB)
    data["topology"].update(
        nodes=nodes, oversub=oversub, cluster_nodes=max(2 * nodes, 16), placement="scattered"
    )
    data["network"].update(
        tier=tier,
        background_flows=["1->0"] if greedy else [],
        packet_samples=args.samples,
        packet_settle_s=args.settle,
        packet_span_s=args.span,
    )
    data["run"].update(steps=args.steps, warmup=min(5, args.steps - 1))
    return from_dict(data, source=str(JOB)).config


def reference_rows(path: Path | None) -> dict[tuple[float, int, bool], dict]:
    """An earlier run's rows by point, for their packet tier; empty without ``path``."""
    if path is None:
        return {}
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"{path}: not a tier_check.json ({err})") from None
    return {(float(r["oversub"]), int(r["nodes"]), bool(r["greedy"])): r for r in rows}


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(cfg: SimConfig) -> dict:
    forget()  # every packet point from cold: nothing remembered from an earlier point
    cpu, wall = cpu_s(), time.perf_counter()
    summary = simulate(cfg).summary()
    return {
        "iteration_ms": summary["iteration_ms"],
        "comm_ms": summary["comm_ms"],
        "wall_s": time.perf_counter() - wall,
        "cpu_s": cpu_s() - cpu,
    }


def pct(value: float | None, truth: float | None) -> str:
    if value is None or not truth:
        return "–"
    return f"{100 * (value - truth) / truth:+.1f} %"


def error(row: dict, tier: str, key: str) -> float | None:
    fast, packet = row.get(tier), row.get("packet")
    if not fast or not packet:
        return None
    return (fast[key] - packet[key]) / packet[key]


def table(rows: list[dict]) -> str:
    head = (
        "| oversub | nodes | greedy | iteration ms: analytical / flow / packet "
        "| comm ms: analytical / flow / packet | comm error: analytical / flow "
        "| iteration error: analytical / flow | wall s: analytical / flow / packet "
        "| packet CPU s |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:

        def cell(key: str, fmt: str, r: dict = r) -> str:
            return " / ".join(fmt.format(r[t][key]) if r.get(t) else "–" for t in TIERS)

        comm = " / ".join(pct(r[t]["comm_ms"], _packet(r, "comm_ms")) for t in TIERS[:2])
        it = " / ".join(pct(r[t]["iteration_ms"], _packet(r, "iteration_ms")) for t in TIERS[:2])
        cpu = f"{r['packet']['cpu_s']:.0f}" if r.get("packet") else r.get("skipped", "–")
        lines.append(
            f"| {r['oversub']:g} | {r['nodes']} | {'yes' if r['greedy'] else 'no'} "
            f"| {cell('iteration_ms', '{:.2f}')} | {cell('comm_ms', '{:.2f}')} | {comm} | {it} "
            f"| {cell('wall_s', '{:.1f}')} | {cpu} |"
        )
    return head + "\n".join(lines) + "\n"


def _packet(row: dict, key: str) -> float | None:
    return row["packet"][key] if row.get("packet") else None


def plot(rows: list[dict], path: Path) -> None:
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("communication error against packet", "wall seconds")
    )
    for tier, colour in (("analytical", "#1f77b4"), ("flow", "#ff7f0e")):
        pts = [r for r in rows if error(r, tier, "comm_ms") is not None]
        fig.add_trace(
            go.Scatter(
                x=[f"{r['nodes']}n o{r['oversub']:g}{' g' if r['greedy'] else ''}" for r in pts],
                y=[100 * error(r, tier, "comm_ms") for r in pts],
                mode="markers",
                name=f"{tier} error %",
                marker={"color": colour, "size": 10},
            ),
            row=1,
            col=1,
        )
    for tier in TIERS:
        pts = [r for r in rows if r.get(tier)]
        fig.add_trace(
            go.Scatter(
                x=[f"{r['nodes']}n o{r['oversub']:g}{' g' if r['greedy'] else ''}" for r in pts],
                y=[r[tier]["wall_s"] for r in pts],
                mode="markers",
                name=f"{tier} wall s",
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="Tiers checked against the packet tier (ns-3)")
    fig.write_html(path, include_plotlyjs="cdn")


def reference(nodes: int, tier: str, steps: int) -> SimConfig:
    cfg = load(str(REFERENCE)).config
    return cfg.replace(
        topology=dataclasses.replace(
            cfg.topology, nodes=nodes, cluster_nodes=max(nodes, cfg.topology.cluster_nodes)
        ),
        network=dataclasses.replace(cfg.network, tier=tier),
        pacing=dataclasses.replace(cfg.pacing, strategy="off"),
        run=dataclasses.replace(
            cfg.run, steps=steps, warmup=min(cfg.run.warmup, steps // 10), record_events=False
        ),
    )


def work(cfg: SimConfig, tier: str) -> float:
    """The run's work in the tier's unit (see the module's doc)."""
    world, g = cfg.topology.world_size, cfg.topology.gpus_per_node
    nbytes = int(cfg.workload.bucket_bytes()[0])
    p = plan("all_reduce", cfg.network.algorithm, nbytes, np.arange(world), g)
    if tier == "analytical":
        return float(world * cfg.run.steps)
    if tier == "flow":
        buckets = cfg.workload.bucket_bytes().size
        return float(cfg.run.steps * buckets * sum(ph.coflows for ph in p.phases))
    moved = sum(float(one_node(ph, g).nbytes.sum()) for ph in p.phases)
    return moved / (cfg.network.packet_mtu - HEADERS)


def speed(tiers: list[str], args: argparse.Namespace, console: Console) -> list[dict]:
    rows = []
    for tier in tiers:
        nodes = 4
        while nodes <= args.max_nodes:
            cfg = reference(nodes, tier, args.steps)
            r = timed(cfg)
            rate = work(cfg, tier) / max(r["cpu_s"], 1e-9)
            rows.append({"tier": tier, "nodes": nodes, **r, "rate": rate})
            console.print(
                f"{tier} {nodes} nodes x {args.steps}: {r['cpu_s']:.1f} CPU s, "
                f"{r['wall_s']:.1f} s wall, {rate:,.0f} per CPU s"
            )
            (args.out / "tier_speed.json").write_text(json.dumps(rows, indent=1))
            if r["cpu_s"] > 60:
                break
            nodes *= 2
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--nodes", default="16,32,64")
    parser.add_argument("--oversub", default="1,4")
    parser.add_argument("--greedy", default="no,yes", help="no, yes or no,yes")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--settle", type=float, default=0.2)
    parser.add_argument("--span", type=float, default=0.2)
    parser.add_argument("--packet-budget", type=float, default=1800.0, help="CPU s per point")
    parser.add_argument("--speed", help="measure these tiers' speed instead, e.g. analytical,flow")
    parser.add_argument("--max-nodes", type=int, default=1 << 14)
    parser.add_argument(
        "--packet-from",
        type=Path,
        help="an earlier run's tier_check.json: its packet rows stand in for ns-3 at the "
        "same points (the fast tiers simulated again against the same reference)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.speed:
        speed(args.speed.split(","), args, Console())
        return 0
    points = [
        (float(o), int(n), g == "yes")
        for o in args.oversub.split(",")
        for g in args.greedy.split(",")
        for n in args.nodes.split(",")
    ]
    rows: list[dict] = []
    console = Console()
    earlier = reference_rows(args.packet_from)
    with Progress(console=console) as progress:
        task = progress.add_task("tier check", total=len(points) * len(TIERS))
        for oversub, nodes, greedy in points:
            row: dict = {"oversub": oversub, "nodes": nodes, "greedy": greedy}
            for tier in TIERS:
                progress.update(task, description=f"{nodes} nodes o{oversub:g} {tier}")
                cfg = config(nodes, oversub, greedy, tier, args)
                known = earlier.get((oversub, nodes, greedy), {})
                if tier == "packet" and "packet" in known:
                    row.update({k: known[k] for k in ("packet", "packet_estimate_cpu_s")})
                    row["packet_from"] = str(args.packet_from)
                    progress.advance(task)
                    continue
                if tier == "packet":
                    row["packet_estimate_cpu_s"] = estimate_packet_cpu_s(cfg)
                    if row["packet_estimate_cpu_s"] > args.packet_budget:
                        row["skipped"] = f"> {args.packet_budget:g} (est.)"
                        progress.advance(task)
                        continue
                row[tier] = timed(cfg)
                progress.advance(task)
            rows.append(row)
            (args.out / "tier_check.json").write_text(json.dumps(rows, indent=1))
            console.print(table([row]).splitlines()[-1])
    text = table(rows)
    (args.out / "tier_check.md").write_text(text)
    plot(rows, args.out / "tier_check.html")
    console.print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
