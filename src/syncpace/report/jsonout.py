"""The JSON the command line prints: one unit per quantity, named in every key, and a
schema version.

The analysis keeps each figure in the unit it is measured in (nanoseconds from the
clocks, milliseconds in findings' evidence, seconds in pacing settings); what the
command line prints is converted here, once, so that a reader of ``--json`` meets one
unit per quantity:

- every duration and time is in **milliseconds**, its key ending in ``_ms`` (or
  ``_ms_`` inside, as ``comm_ms_per_step``); a key naming a time unit on a mapping or a
  list (``iteration_ms: {"mean": …, "p99": …, "cv": …, "count": …}``) holds
  milliseconds in every number under it but the counts and ratios;
- every bandwidth in gigabytes (10⁹ bytes) per second, ``_gbytes_per_s`` (never
  ``gbps``, which reads as gigabits);
- a rate per second (``throughput_steps_per_s``), a byte count, a share (0–1) and a
  count are left as they are.

``schema_version`` (:data:`SCHEMA_VERSION`) is raised whenever a key is renamed or
its meaning changes; docs/report.md describes the layout.
"""

from __future__ import annotations

import json
from typing import Any

#: The version of the layout of every JSON the command line prints.
SCHEMA_VERSION = 2

#: What each time unit is in milliseconds.
_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
#: Numbers under a unit-bearing key that are not durations.
_NOT_TIMES = {"cv", "count", "n", "steps", "rank", "calls", "samples", "ranks"}
_NOT_TIME_TOKENS = {"share", "fraction", "ratio", "count", "steps", "error", "cv"}
UNITS = {
    "durations": "ms",
    "bandwidths": "GB/s (10^9 bytes per second)",
    "sizes": "bytes",
    "shares": "fractions of 1",
}


def rename(key: str) -> tuple[str, float | None]:
    """``key`` with its unit made the one of its quantity, and the factor its values
    are multiplied by (``None``: not a duration, values unchanged)."""
    tokens = key.split("_")
    factor = None
    for i, token in enumerate(tokens):
        if token == "gbps":
            tokens[i] = "gbytes_per_s"
        elif token in _TO_MS and not (i and tokens[i - 1] == "per") and factor is None:
            factor = _TO_MS[token]
            tokens[i] = "ms"
    return "_".join(tokens), factor


def _scaled(value: Any, factor: float) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return round(value * factor, 6)
    if isinstance(value, list):
        return [_scaled(v, factor) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            name, own = rename(str(k))
            if own is not None:
                out[name] = _scaled(v, own)
            elif str(k) in _NOT_TIMES or set(str(k).split("_")) & _NOT_TIME_TOKENS:
                out[name] = normalise(v)
            else:
                out[name] = _scaled(v, factor)
        return out
    return value


def normalise(value: Any) -> Any:
    """``value`` (plain JSON data) with every key in the units above."""
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for k, v in value.items():
        name, factor = rename(str(k))
        out[name] = normalise(v) if factor is None else _scaled(v, factor)
    return out


def document(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` normalised, under ``schema_version`` and ``units``."""
    return {"schema_version": SCHEMA_VERSION, "units": UNITS, **normalise(data)}


def dumps(data: dict[str, Any], **options: Any) -> str:
    """The JSON text of :func:`document`; values JSON cannot hold go through ``str``."""
    plain = json.loads(json.dumps(data, default=str, allow_nan=options.pop("allow_nan", True)))
    return json.dumps(document(plain), indent=2, **options)
