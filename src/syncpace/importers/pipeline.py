"""One conversion, the same for every format: what a converter is handed, and the writing.

Settings, the output directory (checked before anything is read), the converter's own
options, its files found and counted, progress over their bytes; then the converter's
``read`` and :func:`~syncpace.importers.tracebuild.write_trace`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from syncpace.errors import ConfigError
from syncpace.importers import registry, tracebuild
from syncpace.importers.config import ImportConfig
from syncpace.importers.contract import Request
from syncpace.importers.sources import total_bytes
from syncpace.importers.tracebuild import ImportResult

#: Progress of a conversion: bytes read so far, of the input's total.
Progress = Callable[[int, int], None]


class _Bytes:
    """Counts the bytes a converter reports and hands the running total to ``progress``."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.done, self._progress = total, 0, progress

    def __call__(self, n: int) -> None:
        self.done += n
        if self._progress is not None:
            self._progress(self.done, self.total)


def convert(
    name: str,
    sources: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    config: ImportConfig | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> ImportResult:
    """Convert ``sources`` (files, or directories searched) of format ``name`` into a
    syncpace trace in ``out_dir``."""
    converter = registry.converter(name)
    config = config or ImportConfig()
    unknown = sorted(set(options) - set(converter.options))
    if unknown:
        takes = ", ".join(converter.options) or "none"
        raise ConfigError(f"import format {name!r} takes no option {unknown[0]!r} (takes: {takes})")
    out = tracebuild.check_out_dir(out_dir, config.overwrite)
    files = converter.find([Path(s) for s in sources])
    total = total_bytes(files)
    request = Request(name, tuple(files), config, total, _Bytes(total, progress), options)
    return tracebuild.write_trace(converter.read(request), request, out)
