"""What vouches for the bytes of a rank's files: the metadata's checksum, and whether its
streams carry one in every batch (a batch without one is checked row by row).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syncpace.trace import schema


def checksum_warning(path: Path, meta: dict[str, Any]) -> str | None:
    """A warning when the metadata's checksum (written by the writer) does not match
    its content: edited by hand or damaged. ``None`` when it matches or is absent."""
    written = meta.get(schema.CHECKSUM_KEY)
    if written is None:
        return None
    if not isinstance(written, str) or schema.meta_checksum(meta) != written:
        return f"{path}: its checksum does not match its content (edited by hand, or damaged)"
    return None


def expects_checksums(meta: dict[str, Any]) -> bool:
    """Whether the rank's streams were written with a checksum in every batch: the
    writer that checksums its metadata does so in every batch with rows (older
    writers, version 1 and the simulator checksum neither)."""
    return meta.get(schema.CHECKSUM_KEY) is not None and meta.get("schema_version") != 1


def unvouched_warning(path: Path, batches: list[Any], rows: int, what: str) -> str:
    shown = ", ".join(map(str, batches[:5])) + (", ..." if len(batches) > 5 else "")
    return (
        f"{path}: batch(es) {shown} carry no checksum though its writer checksums every "
        f"batch (rewritten by another program?): {rows:,} {what} checked only against "
        "the format's rules"
    )
