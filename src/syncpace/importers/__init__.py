"""Other tools' traces, converted to the syncpace trace schema.

A small registry: each format names the module whose ``convert(sources, out_dir, *,
config, progress) -> ImportResult`` writes a syncpace run directory from that tool's
files. Modules are imported when their format is used, so a format whose module is not
part of this build is listed and refused with one line instead of breaking the others.
Importers read only :mod:`syncpace.trace` and the foundation. Flight Recorder dumps are
also read in place (``importers.flight_recorder.load_run``: ``diagnose`` and ``hang``
take a folder of dumps as a run); ``syncpace import flight-recorder`` writes them as a
run directory for every other command.

=================  ===============================================  ======================
format             reads                                            module
=================  ===============================================  ======================
kineto             PyTorch profiler (Kineto) Chrome-trace JSON      ``importers.kineto``
nccl-inspector     NCCL Inspector plugin JSON logs                  ``importers.inspector``
flight-recorder    PyTorch Flight Recorder dumps                    ``importers.flight_recorder``
=================  ===============================================  ======================
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from syncpace.errors import ConfigError
from syncpace.importers.config import ImportConfig
from syncpace.importers.tracebuild import ImportResult

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Format:
    name: str
    module: str
    reads: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("kineto", "syncpace.importers.kineto", "PyTorch profiler (Kineto) JSON traces"),
        Format("nccl-inspector", "syncpace.importers.inspector", "NCCL Inspector plugin logs"),
        Format(
            "flight-recorder",
            "syncpace.importers.flight_recorder",
            "PyTorch Flight Recorder dumps",
        ),
    )
}


def converter(name: str) -> Callable[..., ImportResult]:
    """The ``convert`` function of format ``name``; a one-line error when the format is
    unknown or not available in this build."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ConfigError(f"unknown import format {name!r} (known: {', '.join(FORMATS)})")
    try:
        module = importlib.import_module(fmt.module)
    except ModuleNotFoundError as exc:
        if exc.name != fmt.module:
            raise
        raise ConfigError(f"import format {name!r} is not available in this build") from None
    convert = getattr(module, "convert", None)
    if not callable(convert):
        raise ConfigError(f"import format {name!r} is not available in this build")
    return convert


def available() -> dict[str, bool]:
    """Format name -> whether this build can convert it."""
    out = {}
    for name in FORMATS:
        try:
            converter(name)
            out[name] = True
        except ConfigError:
            out[name] = False
    return out


def convert(
    name: str,
    sources: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    config: ImportConfig | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> ImportResult:
    """Convert ``sources`` of format ``name`` into a syncpace trace in ``out_dir``."""
    return converter(name)(
        list(sources), out_dir, config=config or ImportConfig(), progress=progress, **options
    )


__all__ = ["FORMATS", "Format", "ImportConfig", "ImportResult", "available", "convert", "converter"]
