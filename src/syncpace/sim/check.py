"""The replay check: a simulation calibrated from a trace first replays that trace.

The calibrated model is run at the traced job's own size (its ranks in whole nodes of
the configuration's GPUs per node), unpaced as the traced run was, and its mean
iteration time and coefficient of variation are compared with the trace's. Within
:data:`MEAN_TOLERANCE` and :data:`CV_TOLERANCE` the model reproduces what it was
calibrated on and its predictions are shown; otherwise they are withheld, with the
reason in one line: a model that cannot give back its own trace has no standing at
another scale.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from syncpace.sim.calibrate import Calibration
from syncpace.sim.engine import SimConfig, simulate

#: Largest relative error of the mean iteration time for predictions to be shown.
MEAN_TOLERANCE = 0.05
#: Largest absolute error of the coefficient of variation.
CV_TOLERANCE = 0.03
#: Fewest iterations the replay simulates (its CV needs a few hundred to settle).
REPLAY_STEPS = 400


@dataclass(frozen=True)
class ReplayCheck:
    nodes: int  # the traced job's size, in simulated nodes (0: it could not be replayed)
    simulated_ms: float
    measured_ms: float
    simulated_cv: float
    measured_cv: float
    reason: str | None = None  # why predictions are withheld (None: they are shown)

    @property
    def mean_error(self) -> float:
        return self.simulated_ms / self.measured_ms - 1 if self.measured_ms > 0 else 0.0

    @property
    def cv_error(self) -> float:
        return self.simulated_cv - self.measured_cv

    @property
    def passed(self) -> bool:
        return self.reason is None

    def line(self) -> str:
        """The check in one line, as every output prints it."""
        if not self.nodes:
            return f"simulator check: not run ({self.reason})"
        return (
            f"simulator check at {self.nodes} nodes: {self.simulated_ms:.0f} ms per iteration "
            f"simulated, {self.measured_ms:.0f} measured ({self.mean_error:+.1%}); "
            f"CV {self.simulated_cv:.3f} simulated, {self.measured_cv:.3f} measured"
        )

    def withheld(self) -> str | None:
        """The one line that replaces the predictions when the check failed."""
        return None if self.reason is None else f"predictions withheld: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        out = {k.name: getattr(self, k.name) for k in dataclasses.fields(self)}
        return out | {"mean_error": self.mean_error, "cv_error": self.cv_error}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplayCheck:
        return cls(**{k.name: data[k.name] for k in dataclasses.fields(cls)})


def replay_check(config: SimConfig, calibration: Calibration) -> ReplayCheck:
    """Simulate ``config`` (calibrated from ``calibration``'s trace) at the traced size
    and compare it with the trace (see the module docstring)."""
    measured, cv = calibration.measured_ms, calibration.measured_cv
    world, gpus = calibration.world_size, config.topology.gpus_per_node
    if not world or measured is None or cv is None:
        return ReplayCheck(0, 0.0, 0.0, 0.0, 0.0, "the trace has fewer than 2 iterations")
    if world % gpus:
        why = f"the trace's {world} ranks do not fill nodes of {gpus} GPUs"
        return ReplayCheck(0, 0.0, measured, 0.0, cv, why)
    nodes = world // gpus
    steps = max(config.run.steps, REPLAY_STEPS)
    replay = config.replace(
        topology=dataclasses.replace(config.topology, nodes=nodes),
        pacing=dataclasses.replace(config.pacing, strategy="off"),
        run=dataclasses.replace(config.run, steps=steps, warmup=steps // 20, record_events=False),
    )
    summary = simulate(replay).summary()
    check = ReplayCheck(nodes, summary["iteration_ms"], measured, summary["cv"], cv)
    problems = []
    if abs(check.mean_error) > MEAN_TOLERANCE:
        problems.append(f"mean {check.mean_error:+.1%} (limit ±{MEAN_TOLERANCE:.0%})")
    if abs(check.cv_error) > CV_TOLERANCE:
        problems.append(f"CV {check.cv_error:+.3f} (limit ±{CV_TOLERANCE:.2f})")
    if not problems:
        return check
    why = f"the model calibrated from the trace does not replay it at {nodes} nodes: " + ", ".join(
        problems
    )
    return dataclasses.replace(check, reason=why)
