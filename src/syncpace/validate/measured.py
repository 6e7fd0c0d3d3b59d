"""A grid point as measured on the fabric, and its simulation on the tier chosen for it.

The grid (:mod:`.grid`) measures each point once: the real run's statistics, the
benchmark's α–β fit, the compute profile from the run's trace, and the fabric it ran
on (rate, queue, the congestion control read back from its hosts). It then simulates
the point on its tier (:func:`tiers_of`: analytical unless chosen). ``validation.json``
keeps those measurements in every row, so :func:`load_measured` and :func:`resimulate`
run the same points on another tier, without root and without running them again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from syncpace.errors import ConfigError
from syncpace.sim.calibrate import Calibration, ComputeProfile
from syncpace.sim.engine import SimConfig, simulate
from syncpace.validate.compare import Comparison, Stats, Thresholds, compare
from syncpace.validate.model import TIERS, Fabric, Point, sim_config, sim_stats


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What the grid measured of one point: all a simulation of it is calibrated from."""

    point: Point
    real: Stats
    bench: Calibration
    profile: ComputeProfile
    fabric: Fabric


def tiers_of(text: str, points: list[Point]) -> dict[str, str]:
    """The simulator's tier per point: ``"packet"`` for every point, or
    ``"star4-contended=packet,ls4=flow"`` for those named (the others analytical)."""
    tiers = dict.fromkeys((pt.name for pt in points), "analytical")
    text = text.strip()
    if not text:
        return tiers
    if "=" not in text:
        _check_tier(text)
        return dict.fromkeys(tiers, text)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, tier = (part.strip() for part in item.partition("="))
        if not sep or name not in tiers:
            raise ConfigError(
                f"tiers: {item!r} is not POINT=TIER for a point of this grid ({', '.join(tiers)})"
            )
        _check_tier(tier)
        tiers[name] = tier
    return tiers


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ConfigError(f"tiers: {tier!r} is not one of {', '.join(TIERS)}")


def simulate_point(
    m: Measured, tier: str, steps: int, seed: int, limits: Thresholds
) -> tuple[Comparison, SimConfig]:
    """The point simulated on ``tier`` and compared with its real run."""
    cfg = sim_config(m.point, m.bench, m.profile, steps, seed, tier=tier, fabric=m.fabric)
    return compare(m.point.name, m.real, sim_stats(simulate(cfg)), limits, tier=tier), cfg


def setup_json(m: Measured, cfg: SimConfig) -> dict[str, Any]:
    """What a row of ``validation.json`` keeps of the measurement (:func:`load_measured`
    reads it back) and the simulator's configuration."""
    return {
        "point": m.point.__dict__,
        "bench": m.bench.to_json(),
        "profile": m.profile.__dict__,
        "fabric": asdict(m.fabric),
        "sim_config": cfg.to_json(),
    }


def load_measured(path: str | Path, points: dict[str, Point]) -> list[Measured]:
    """The measured points of an earlier grid's ``validation.json``."""
    path = Path(path)
    try:
        rows = json.loads(path.read_text())["rows"]
        return [_measured(row, points) for row in rows]
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a validation grid's output: {exc!r}") from None


def _measured(row: dict[str, Any], points: dict[str, Point]) -> Measured:
    name, setup = row["point"], row["setup"]
    if name not in points:
        raise ConfigError(f"point {name!r} is not one of this grid's")
    if "fabric" not in setup:
        raise ConfigError(f"{name}: no recorded fabric (a grid from before it was recorded)")
    return Measured(
        point=points[name],
        real=Stats(**row["real"]),
        bench=Calibration(**_tuples(setup["bench"])),
        profile=ComputeProfile(**_tuples(setup["profile"])),
        fabric=Fabric(**setup["fabric"]),
    )


def _tuples(values: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
