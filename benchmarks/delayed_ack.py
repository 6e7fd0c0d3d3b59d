"""Which of Linux's TCP behaviours stalls the small ring steps of ``star8-delayed-ack``?

The validation grid's ``star8-delayed-ack`` point (8 ranks on a 50 Mbit/s star, one
256 KiB ring all-reduce after ~200 ms of jittered sleep, 32 KiB a ring step, hosts
with Linux's delayed ACKs) loses a few collectives a run to stalls of 40 ms and more;
``star8`` (the same with ``quickack`` on the hosts' routes) does not. This runs the
point's job on fresh fabrics with one thing changed at a time and counts, per run,
the collectives slower than 1.5x the run's median transfer and the delayed-ACK timers
the hosts' kernels fired (``TcpExtDelayedACKs`` of each host namespace):

* ``as-is``: the point as the grid runs it;
* ``quickack``: every segment acknowledged at once (the ``star8`` point);
* ``no-jitter``: every rank sleeps the same 200 ms, so ranks enter together;
* ``reno``: the hosts' congestion control reno instead of the kernel's (bbr here);
* ``pingpong-255``: ``net.ipv4.tcp_pingpong_thresh`` 255 on every host, so a
  connection never enters Linux's interactive (delayed-ACK-for-piggybacking) mode.

Conditions alternate within each repeat, so the machine's load falls on all alike.
Needs root (network namespaces).

    sudo python benchmarks/delayed_ack.py [--repeats 2] [--steps 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from syncpace.analysis.metrics import compute_metrics
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.lifecycle import down, up
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.ports import free_port
from syncpace.trace import load_trace
from syncpace.validate.grid import GRID, fabric_spec, worker_args
from syncpace.validate.model import real_stats

WARMUP = 5
SLOW = 1.5  # a collective slower than this times the run's median transfer is a stall
CONDITIONS = ("as-is", "quickack", "no-jitter", "reno", "pingpong-255")


def delayed_acks(namespace: str, backend: SystemBackend) -> int:
    """``TcpExtDelayedACKs`` of one host namespace (its own ``/proc/net/netstat``)."""
    text = backend.run(["ip", "netns", "exec", namespace, "cat", "/proc/net/netstat"]).stdout
    lines = [line.split() for line in text.splitlines() if line.startswith("TcpExt:")]
    names, values = lines[0], lines[1]
    return int(values[names.index("DelayedACKs")])


def run_condition(condition: str, steps: int, out: Path, log) -> dict:
    base = next(p for p in GRID if p.name == "star8-delayed-ack")
    point = {
        "quickack": dataclasses.replace(base, quickack=True),
        "no-jitter": dataclasses.replace(base, jitter=0.0),
    }.get(condition, base)
    backend = SystemBackend()
    state = up(fabric_spec(point, "50mbit", "reno" if condition == "reno" else ""), backend)
    run_dir = out
    try:
        if condition == "pingpong-255":
            for host in state.fabric.hosts:
                backend.run(
                    ["ip", "netns", "exec", host.namespace]
                    + ["sysctl", "-q", "-w", "net.ipv4.tcp_pingpong_thresh=255"]
                )
        env = traced_env(run_dir, TraceConfig(dir=str(run_dir)))
        options = RunOptions(timeout_s=60 + steps, grace_s=5.0, master_port=free_port())
        result = run_job(state, worker_args(point, steps), run_dir, backend, options, env, log)
        if result.returncode != 0:
            raise RuntimeError(f"{condition}: the job failed: {result.reason} (in {run_dir})")
        acks = sum(delayed_acks(h.namespace, backend) for h in state.fabric.hosts)
        ran = state.fabric.congestion_control
    finally:
        down(state, backend)
    stats, _ = real_stats(run_dir, WARMUP)
    inst = compute_metrics(load_trace(run_dir), warmup_steps=WARMUP).instances
    transfer = inst.filter(pl.col("complete"), pl.col("service_ns") > 0)["service_ns"]
    ms = transfer.to_numpy() / 1e6
    median = float(np.median(ms))
    return {
        "condition": condition,
        "congestion_control": ran,
        "collectives": int(ms.size),
        "stalls": int((ms > SLOW * median).sum()),
        "transfer_ms_p50": median,
        "transfer_ms_p90": float(np.percentile(ms, 90)),
        "transfer_ms_max": float(ms.max()),
        "iteration_ms": stats.iteration_ms,
        "cv": stats.cv,
        "delayed_acks": acks,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--out", default="", help="keep the runs here (default: a temp dir)")
    args = p.parse_args()
    conditions = [c for c in args.conditions.split(",") if c]
    unknown = set(conditions) - set(CONDITIONS)
    if unknown:
        p.error(f"unknown conditions {sorted(unknown)}; known: {', '.join(CONDITIONS)}")
    out = Path(args.out or tempfile.mkdtemp(prefix="delayed-ack-"))
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with open(out / "runs.log", "w") as log, Progress() as progress:
        task = progress.add_task("runs", total=args.repeats * len(conditions))
        for repeat in range(args.repeats):
            for condition in conditions:
                run_dir = out / f"{condition}-{repeat}"
                rows.append(run_condition(condition, args.steps, run_dir, log))
                progress.advance(task)
    (out / "delayed_ack.json").write_text(json.dumps(rows, indent=1))
    table = Table(title=f"star8-delayed-ack, one thing changed ({args.repeats} runs each)")
    for column in (
        "condition",
        "hosts ran",
        "stalls / collectives",
        "transfer ms p50 / p90 / max",
        "iteration ms, CV",
        "delayed-ACK timers",
    ):
        table.add_column(column)
    for condition in conditions:
        mine = [r for r in rows if r["condition"] == condition]
        table.add_row(
            condition,
            mine[0]["congestion_control"],
            ", ".join(f"{r['stalls']}/{r['collectives']}" for r in mine),
            ", ".join(
                f"{r['transfer_ms_p50']:.0f}/{r['transfer_ms_p90']:.0f}/{r['transfer_ms_max']:.0f}"
                for r in mine
            ),
            ", ".join(f"{r['iteration_ms']:.0f}, {r['cv']:.3f}" for r in mine),
            ", ".join(str(r["delayed_acks"]) for r in mine),
        )
    Console(width=150).print(table)
    cv = {c: statistics.median(r["cv"] for r in rows if r["condition"] == c) for c in conditions}
    print("median CV: " + ", ".join(f"{c} {v:.3f}" for c, v in cv.items()))
    print(f"runs kept in {out}")


if __name__ == "__main__":
    main()
