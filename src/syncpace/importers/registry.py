"""The formats ``syncpace import`` reads: name -> the module whose ``CONVERTER`` reads it.

Modules are imported when their format is used, so a format whose module is not part of
this build is listed and refused with one line instead of breaking the others, and
``syncpace import --help`` lists every format without importing any.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from syncpace.errors import ConfigError
from syncpace.importers.contract import Converter


@dataclass(frozen=True)
class Format:
    """A format: its name on the command line, the module that holds its ``CONVERTER``
    (a :class:`~syncpace.importers.contract.Converter`), and what it reads, in words."""

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


def register(fmt: Format) -> None:
    """Add a format (one of one's own, from outside the package); a name taken is refused."""
    if fmt.name in FORMATS:
        raise ConfigError(f"import format {fmt.name!r} is already registered")
    FORMATS[fmt.name] = fmt


def unregister(name: str) -> None:
    FORMATS.pop(name, None)


def converter(name: str) -> Converter:
    """The converter of format ``name``; a one-line error when the format is unknown or
    not available in this build."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ConfigError(f"unknown import format {name!r} (known: {', '.join(FORMATS)})")
    try:
        module = importlib.import_module(fmt.module)
    except ModuleNotFoundError as exc:
        if exc.name != fmt.module:
            raise
        raise ConfigError(f"import format {name!r} is not available in this build") from None
    found = getattr(module, "CONVERTER", None)
    if not isinstance(found, Converter):
        raise ConfigError(f"import format {name!r} is not available in this build")
    return found


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
