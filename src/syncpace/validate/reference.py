"""The reference study as a simulator scenario, with and without pacing.

Runs ``examples/scenarios/reference_study.toml`` (4–64 nodes of 8 GPUs, 3:1 leaf-spine
shared with other jobs, heavy-tailed noise, busy-polling waiters) without pacing and
with each pacing strategy, then with the model's assumptions changed one at a time (no
transient noise; waiting is free), and prints CV and throughput per scale next to the
reference's figures (CV 0.22 → 0.09 and +11 % throughput at 64 nodes). The paced arm
is the pacer a live run uses, with the scenario's settings: the policy, its lag and its
A/B guard. Nothing is fitted to the reference's figures. See docs/validation.md.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syncpace.sim import scenario as scenarios
from syncpace.sim.study import run_study
from syncpace.validate.settings import ReferenceSettings

ROOT = Path(__file__).resolve().parents[3]  # the repository (examples/)
REFERENCE = {"nodes": 64, "cv_off": 0.22, "cv_on": 0.09, "gain": 0.11}
VARIANTS = {
    "as configured": [],
    "no transient noise": [
        "noise.loader_prob=0",
        "noise.os_burst_prob=0",
        "noise.throttle_rate=0",
    ],
    "waiting is free": ['interference.mode="none"'],
    # a longer run: the A/B guard's verdict falls at step 399 (10 window pairs)
    "1,000 iterations": ["run.steps=1000"],
}
STRATEGIES = ("early", "target")


def run_reference(settings: ReferenceSettings, console: Console) -> int:
    """Print (and with ``settings.json`` write) the study rows next to the reference's."""
    path = settings.scenario or str(ROOT / "examples/scenarios/reference_study.toml")
    json_path = settings.json
    base = scenarios.load(path)
    nodes = base.study_nodes or (4, 8, 16, 32, 64)
    began = time.monotonic()
    rows = []
    for variant, sets in VARIANTS.items():
        config = scenarios.override(base.config, sets)
        for strategy in STRATEGIES:
            if variant != "as configured" and strategy != "early":
                continue
            pacing = dataclasses.replace(config.pacing, strategy=strategy)
            console.print(f"[dim]{variant}, pacing {strategy} …[/]")
            study = run_study(config.replace(pacing=pacing), nodes)
            plain = {r["nodes"]: r for r in study.arm(False)}
            for r in study.arm(True):
                off = plain[r["nodes"]]
                rows.append(
                    {
                        "variant": variant,
                        "strategy": strategy,
                        "nodes": r["nodes"],
                        "cv_off": off["cv"],
                        "cv_on": r["cv"],
                        "samples_off": off["throughput"],
                        "samples_on": r["throughput"],
                        "efficiency_off": off["efficiency"],
                        "gain": r["pacing_gain"],
                        "ab_state": r["ab_state"],
                    }
                )
    table = Table(title=f"reference study ({Path(path).name}) vs the reference")
    for col in (
        "model",
        "pacing",
        "nodes",
        "CV off",
        "CV on",
        "samples/s off",
        "samples/s on",
        "efficiency off",
        "A/B",
        "pacing gain",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["variant"],
            r["strategy"],
            str(r["nodes"]),
            f"{r['cv_off']:.3f}",
            f"{r['cv_on']:.3f}",
            f"{r['samples_off']:,.0f}",
            f"{r['samples_on']:,.0f}",
            f"{r['efficiency_off']:.0%}",
            r["ab_state"] or "",
            f"{r['gain']:+.1%}",
        )
    table.add_row(
        "reference",
        "early",
        str(REFERENCE["nodes"]),
        f"{REFERENCE['cv_off']:.2f}",
        f"{REFERENCE['cv_on']:.2f}",
        "",
        "",
        "",
        "",
        f"{REFERENCE['gain']:+.0%}",
        style="bold",
    )
    console.print(table)
    wall = time.monotonic() - began
    console.print(f"{len(rows)} rows in {wall:.0f} s")
    if json_path is not None:
        Path(json_path).write_text(json.dumps({"reference": REFERENCE, "rows": rows}, indent=1))
    return 0
