"""The settings of ``syncpace validate``: the fabric grid's and the reference study's."""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import check_numbers, setting
from syncpace.fabric import tcp
from syncpace.fabric.spec import parse_rate


@dataclass(kw_only=True, slots=True)
class GridSettings:
    """The validation grid: real runs on the emulated fabric against the simulator."""

    out: str = setting("runs/validate", "Directory for the runs, validation.json and the plot.")
    points: str = setting("", "Comma-separated point names (default: all).")
    rate: str = setting("50mbit", "Host link rate of every fabric.")
    steps: int = setting(40, "Steps of each real run (the first 5 are warm-up).")
    sim_steps: int = setting(400, "Iterations of each simulation.")
    seed: int = setting(0, "Seed of the simulations.")
    tiers: str = setting(
        "",
        "Simulator tier per point: one tier for every point (analytical, flow, packet) or "
        "POINT=TIER,... for those named (default: analytical).",
    )
    congestion_control: str = setting(
        "",
        "TCP congestion control of the fabrics' hosts (default: the kernel's; what the "
        "hosts ran is read back and recorded either way).",
    )
    resimulate: str = setting(
        "",
        "validation.json of an earlier grid: simulate its measured points again on --tiers "
        "(no root, no real runs); writes resimulated.json into --out.",
    )

    def __post_init__(self) -> None:
        check_numbers(self, steps="[10, 100000]", sim_steps="[20, 10000000]", seed="[0, 1e18]")
        parse_rate(self.rate, "rate")
        if self.congestion_control:
            tcp.check(self.congestion_control)


@dataclass(kw_only=True, slots=True)
class ReferenceSettings:
    """The reference study, with and without pacing (no root needed)."""

    scenario: str | None = setting(None, "Scenario file (default: the reference study).")
    json: str | None = setting(None, "Also write the rows to this JSON file.")

    def __post_init__(self) -> None:
        check_numbers(self)
