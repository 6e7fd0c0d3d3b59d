"""Validation of the simulator against real runs on the emulated fabric.

:mod:`.compare` turns iteration and transfer times into the compared statistics and
judges the errors against thresholds; :mod:`.model` calibrates a simulator
configuration for a grid point from a benchmark (α, β) and the run's own compute
times; :mod:`.grid` runs the real grid and :mod:`.reference` the reference study
(``syncpace validate [--reference]``).
"""

from __future__ import annotations

from syncpace.validate.compare import Comparison, Stats, Thresholds, compare, stats_of
from syncpace.validate.model import ComputeProfile, Point, compute_profile, sim_config

__all__ = [
    "Comparison",
    "ComputeProfile",
    "Point",
    "Stats",
    "Thresholds",
    "compare",
    "compute_profile",
    "sim_config",
    "stats_of",
]
