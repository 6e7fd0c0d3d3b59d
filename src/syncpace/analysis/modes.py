"""The failure modes: one frozen record per mode, in one registry.

A finding's ``mode`` names a :class:`Mode` here. Everything the analysis and the
reports need to know about a mode is a field of its record, so a property is declared
once and every list of modes elsewhere is a query on the registry:

* ``role`` partitions the modes (:class:`Role`): a cause the job pays for, a symptom
  that says where time goes, a note on the trace's quality, a job that stopped, or the
  note that nothing is wrong;
* ``network``: a mode about the network, whose findings the hosts' counters bear on; a
  network mode that is a cause makes exposed communication its symptom;
* ``beyond_overlap``: a network cause costed beyond what overlap saves (the bytes once
  overlap is as good as it can be): it makes exposed communication its symptom only
  where it costs as much;
* ``skew_based``: its findings rest on arrival skews, so an untrustworthy clock halves
  their confidence;
* ``title``: what to call it in a sentence or a heading;
* ``detector``: the function of :mod:`syncpace.analysis.detectors` that finds it
  (``module.function``), run in the order of ``detectors.DETECTORS``;
* ``figure``: the key of its picture in the report's ``finding_figures.FIGURES``, or
  none, with the reason in ``no_figure``: the report is a layer above, so the registry
  names the figure and a test checks the report has it.

A mode's actions are worded by the function of ``detectors.advice`` named after it.

Adding a mode: one :class:`Mode` line in :data:`BUILT_IN` (the recipe for a whole
detector is in ``docs/analysis.md``, "Adding a detector"). Code outside the package
adds its own with :func:`register`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass


class Role(enum.Enum):
    """What a mode's finding is to the job; every mode has exactly one."""

    #: A cause the job pays for: the verdict's candidates, ranked by what removing it saves.
    CAUSE = "cause"
    #: A summary of where time goes: it ranks after the causes and is never the verdict's
    #: cause.
    SYMPTOM = "symptom"
    #: About the trace rather than the job: a data-quality warning.
    QUALITY = "quality"
    #: The job stopped (hung, or its ranks disagree): ranked first whatever else is found.
    STOPPED = "stopped"
    #: Nothing is a warning or worse: the note that heads such a list.
    HEALTHY = "healthy"


_NAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class Mode:
    """One failure mode and everything the code needs to know about it.

    Contract: ``name`` is snake_case, ``title`` is not empty, and a mode has either a
    ``figure`` or a ``no_figure`` reason, never both; a ``ValueError`` says which rule
    a record breaks.
    """

    name: str
    title: str
    role: Role
    #: The function that finds it: ``module.function`` in :mod:`syncpace.analysis.detectors`
    #: for a built-in mode (a test checks it runs), its own module's for one registered
    #: from outside; None: ``diagnose`` adds it (``healthy``).
    detector: str | None
    #: The key of its figure in ``report.finding_figures.FIGURES``; None: see ``no_figure``.
    figure: str | None
    no_figure: str = ""
    network: bool = False
    beyond_overlap: bool = False
    skew_based: bool = False

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"mode name {self.name!r} is not snake_case")
        if not self.title.strip():
            raise ValueError(f"mode {self.name!r} has no title")
        if not isinstance(self.role, Role):
            raise ValueError(f"mode {self.name!r}: role must be a Role, got {self.role!r}")
        if (self.figure is None) == (not self.no_figure.strip()):
            raise ValueError(f"mode {self.name!r}: give either a figure or why it has none")


_HANG_BLOCK = "the hang block (report/hang.py) above the verdict shows it: no numbers to plot"

#: The modes the package ships, in the order they were declared (the order of ``MODES``).
BUILT_IN: tuple[Mode, ...] = (
    Mode("hang", "Hang", Role.STOPPED, "hang.hang_or_desync", None, _HANG_BLOCK),
    Mode("desync", "Desync", Role.STOPPED, "hang.hang_or_desync", None, _HANG_BLOCK),
    Mode(
        "straggler",
        "Straggler",
        Role.CAUSE,
        "arrival.stragglers_and_locality",
        "straggler",
        skew_based=True,
    ),
    Mode(
        "cpu_starvation",
        "CPU starvation",
        Role.CAUSE,
        "arrival.stragglers_and_locality",
        "straggler",
    ),
    Mode(
        "sync_amplification",
        "Synchronisation amplification (jitter)",
        Role.CAUSE,
        "arrival.sync_amplification",
        "sync_amplification",
        skew_based=True,
    ),
    Mode("stall", "Stall", Role.CAUSE, "arrival.stalls", "stall", skew_based=True),
    Mode(
        "fabric_contention",
        "Fabric contention",
        Role.CAUSE,
        "network.fabric_contention",
        "fabric_contention",
        network=True,
    ),
    Mode("slow_link", "Slow link", Role.CAUSE, "network.slow_link", "slow_link", network=True),
    Mode(
        "locality_variance",
        "Locality variance",
        Role.CAUSE,
        "arrival.stragglers_and_locality",
        "locality_variance",
        skew_based=True,
    ),
    Mode(
        "latency_bound",
        "Latency-bound collectives",
        Role.CAUSE,
        "latency.latency_bound",
        "latency_bound",
    ),
    Mode(
        "bandwidth_bound",
        "Bandwidth-bound collectives",
        Role.CAUSE,
        "network.bandwidth_bound",
        "bandwidth_bound",
        network=True,
        beyond_overlap=True,
    ),
    Mode(
        "poor_overlap",
        "Poor compute/communication overlap",
        Role.CAUSE,
        "overlap.poor_overlap",
        "overlap",
    ),
    Mode(
        "comm_dominated",
        "Communication-dominated iterations",
        Role.SYMPTOM,
        "overlap.comm_dominated",
        "overlap",
        network=True,
    ),
    Mode(
        "incomplete_trace",
        "Incomplete trace",
        Role.QUALITY,
        "quality.incomplete_trace",
        "incomplete_trace",
    ),
    Mode(
        "insufficient_data",
        "Too little data",
        Role.QUALITY,
        "quality.insufficient_data",
        None,
        "too few iterations or collectives to draw: its evidence counts what there is",
    ),
    Mode(
        "clock_uncertainty",
        "Clock uncertainty",
        Role.QUALITY,
        "quality.clock_uncertainty",
        "clock_uncertainty",
    ),
    Mode("healthy", "Healthy", Role.HEALTHY, None, "healthy"),
)

#: The registry: name -> mode, the built-in modes first, then any :func:`register` added.
_REGISTRY: dict[str, Mode] = {m.name: m for m in BUILT_IN}


def register(mode: Mode) -> Mode:
    """Add ``mode`` to the registry (for detectors that live outside the package) and
    return it. A name already registered is refused with a ``ValueError``."""
    if mode.name in _REGISTRY:
        raise ValueError(f"mode {mode.name!r} is already registered")
    _REGISTRY[mode.name] = mode
    return mode


def unregister(name: str) -> None:
    """Remove a mode :func:`register` added; a built-in mode is refused (``ValueError``)."""
    if any(m.name == name for m in BUILT_IN):
        raise ValueError(f"mode {name!r} is built in")
    _REGISTRY.pop(name, None)


def is_registered(name: str) -> bool:
    return name in _REGISTRY


def get(name: str) -> Mode:
    """The mode called ``name``; ``KeyError`` when none is registered."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown mode {name!r}") from None


def registered() -> tuple[Mode, ...]:
    """Every registered mode, built-in ones first in their order."""
    return tuple(_REGISTRY.values())


def names(
    where: Callable[[Mode], bool] = lambda m: True, *, built_in: bool = False
) -> tuple[str, ...]:
    """The names of the registered modes for which ``where`` holds, in registry order;
    with ``built_in`` only the built-in ones (the constants kept for importers, fixed
    when the module loads)."""
    among = BUILT_IN if built_in else tuple(_REGISTRY.values())
    return tuple(m.name for m in among if where(m))


def has_role(name: str, role: Role) -> bool:
    """Whether mode ``name`` is registered with ``role`` (False for an unknown name)."""
    mode = _REGISTRY.get(name)
    return mode is not None and mode.role is role


def network_cause(name: str) -> bool:
    """A cause on the network side: with one, exposed communication is its symptom."""
    mode = _REGISTRY.get(name)
    return mode is not None and mode.network and mode.role is Role.CAUSE


def beyond_overlap(name: str) -> bool:
    """A network cause whose cost is what remains once overlap is as good as it can be:
    no part of overlap's saving is in it."""
    mode = _REGISTRY.get(name)
    return mode is not None and mode.beyond_overlap


__all__ = [
    "BUILT_IN",
    "Mode",
    "Role",
    "beyond_overlap",
    "get",
    "has_role",
    "is_registered",
    "names",
    "network_cause",
    "register",
    "registered",
    "unregister",
]
