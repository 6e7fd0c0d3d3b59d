"""Trace replay: rebuild a run as a program, run it again as measured and changed.

``build_program`` turns a run's events into per-rank actions (compute gaps between
calls, waits, joins) and collective instances (a synchronisation plus a transfer on a
stream with the backend's measured concurrency); ``run`` replays it, and the
counterfactuals in :mod:`.counterfactuals` say what each cause costs: the iteration
time saved if it were removed, with the plain replay's own error beside it.
"""

from syncpace.analysis.replay.engine import Change, Pacer, PacerFactory, Replayed, run
from syncpace.analysis.replay.program import (
    Program,
    build_program,
    replayable,
    replayed_steps,
    same_program,
)

__all__ = [
    "Change",
    "Pacer",
    "PacerFactory",
    "Program",
    "Replayed",
    "build_program",
    "replayable",
    "replayed_steps",
    "run",
    "same_program",
]
