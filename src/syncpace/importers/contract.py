"""The contract between a format's converter and the rest of ``syncpace import``.

A converter reads one tool's files and says, per rank, what it found; everything else —
the settings, the output directory, finding and counting the input, progress, steps,
sequence numbers, clocks and the run directory — is shared
(:mod:`~syncpace.importers.pipeline`, :mod:`~syncpace.importers.tracebuild`). The
converter receives a :class:`Request` and returns a :class:`Conversion`:

* ``find(sources)``: the files of its format among the paths given (directories
  searched); raises :class:`~syncpace.errors.TraceError` naming a path that is missing
  or holds none. Called before anything is read.
* ``read(request)``: reads ``request.files`` with bounded memory, reporting the bytes it
  reads to ``request.on_bytes``, and returns a :class:`Conversion`: one
  :class:`RankFrame` per rank, on that rank's own clock, and what the source could not
  tell. It writes nothing. Bad input raises :class:`~syncpace.errors.TraceError` (the
  file and the problem, one line); a setting that cannot apply to the files,
  :class:`~syncpace.errors.ConfigError`. Anything else is a bug.
* ``options``: the names of the keyword options of its own it takes (passed through
  ``importers.convert(..., **options)``, found in ``request.options``); others are
  refused before ``find``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl

from syncpace.importers.config import ImportConfig
from syncpace.trace import schema
from syncpace.trace.stall import StallRecord

#: How the converters mark a column they could not fill.
UNKNOWN = -1

#: Columns a converter hands over: the trace's events, minus ``rank``/``step`` and the
#: device times (a converted trace puts the source's own times in ``enter_ns`` and
#: ``exit_ns``, ``timing`` naming which), plus the host time of the call, which places
#: it in its iteration.
INPUT_COLUMNS: dict[str, Any] = {
    name: dtype
    for name, dtype in pl.from_arrow(schema.EVENTS.empty_table()).schema.items()  # type: ignore[union-attr]
    if name not in ("rank", "step") and not name.startswith("device_")
} | {"call_ns": pl.Int64}

#: What a converter reports as it reads: the bytes just read.
OnBytes = Callable[[int], None]

#: How a rank's iterations are delimited (:attr:`RankFrame.step_rule`).
STEP_RULES = (
    "spans",  # one span per iteration (ProfilerStep#N): a call belongs to the span it is in
    "ends",  # iteration ends (optimizer.step()): a call's step counts the ends before it
    "windows",  # fixed windows of the common timeline (sources that record no iterations)
    "none",  # nothing: the whole trace is one iteration
)


@dataclass(frozen=True)
class Request:
    """What a converter receives: the files ``find`` chose, counted, and the settings."""

    format: str
    files: tuple[Path, ...]
    config: ImportConfig
    input_bytes: int
    #: to be called with the bytes read, as they are read (drives the progress bar)
    on_bytes: OnBytes
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankFrame:
    """What is written for one rank: its collectives and how its iterations are told."""

    rank: int
    #: ``INPUT_COLUMNS``, times on the rank's own clock, ``seq`` -1 (``UNKNOWN``) where the
    #: source has none (then numbered per group and iteration)
    events: pl.DataFrame
    #: ``step``, ``start_ns``, ``end_ns`` on the rank's clock (for "spans" and "ends")
    steps: pl.DataFrame | None = None
    step_rule: str = "none"
    host: str | None = None
    pid: int | None = None
    device: str = "cpu"
    backend: str = "unknown"
    groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    files: Sequence[str] = ()
    #: format notes of this rank, added to its metadata's ``import`` block
    notes: Mapping[str, Any] = field(default_factory=dict)
    #: the rank's stall record (calls in flight), moved with its clock and written beside
    stall: StallRecord | None = None

    def __post_init__(self) -> None:
        if self.step_rule not in STEP_RULES:
            raise ValueError(f"step_rule {self.step_rule!r} is not one of {STEP_RULES}")


@dataclass(frozen=True)
class Conversion:
    """What a converter returns: every rank it read, and what the source could not tell."""

    ranks: Sequence[RankFrame]
    #: the job's size where the source says it (else the highest rank + 1)
    world_size: int | None = None
    #: the metadata's ``source`` (the format's name when empty)
    source: str = ""
    #: the timestamps' resolution: the uncertainty of a clock that needs no offset
    resolution_ns: int = 1_000
    #: what the source cannot tell, in words (``import.missing``)
    missing: Sequence[str] = ()
    warnings: Sequence[str] = ()
    #: format notes, in every rank's ``import`` block
    notes: Mapping[str, Any] = field(default_factory=dict)
    #: clock methods that replace the plan ``--clocks`` makes, per rank
    clock_methods: Mapping[int, str] = field(default_factory=dict)


@runtime_checkable
class Converter(Protocol):
    """One format's reader (see the module docstring for the contract)."""

    options: tuple[str, ...]

    def find(self, sources: Sequence[Path]) -> list[Path]:
        """The files of this format among ``sources`` (files, or directories searched)."""
        ...

    def read(self, request: Request) -> Conversion:
        """Every rank's collectives in ``request.files``; writes nothing."""
        ...
