"""Other tools' traces, converted to the syncpace trace schema.

Each format is a :class:`~syncpace.importers.contract.Converter` (find its files, read
them into per-rank frames) registered by name in :mod:`~syncpace.importers.registry`;
:func:`convert` does the rest the same for all (:mod:`~syncpace.importers.pipeline`,
:mod:`~syncpace.importers.tracebuild`). Importers read only :mod:`syncpace.trace` and
the foundation. Flight Recorder dumps are also read in place
(``importers.flight_recorder.load_run``: ``diagnose`` and ``hang`` take a folder of dumps
as a run); ``syncpace import flight-recorder`` writes them as a run directory for every
other command.

The formats and their modules: ``registry.FORMATS``.
"""

from __future__ import annotations

from syncpace.importers.config import ImportConfig
from syncpace.importers.contract import (
    INPUT_COLUMNS,
    UNKNOWN,
    Conversion,
    Converter,
    RankFrame,
    Request,
)
from syncpace.importers.pipeline import Progress, convert
from syncpace.importers.registry import FORMATS, Format, available, converter, register, unregister
from syncpace.importers.tracebuild import ImportResult

__all__ = [
    "FORMATS",
    "INPUT_COLUMNS",
    "UNKNOWN",
    "Conversion",
    "Converter",
    "Format",
    "ImportConfig",
    "ImportResult",
    "Progress",
    "RankFrame",
    "Request",
    "available",
    "convert",
    "converter",
    "register",
    "unregister",
]
