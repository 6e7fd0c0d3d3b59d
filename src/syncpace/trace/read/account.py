"""A rank's completeness account: what its metadata declares against what its files
held (read to their end) and what the rules left out, every gap said as a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from syncpace.trace import schema
from syncpace.trace.validate.checksums import expects_checksums
from syncpace.trace.validate.completeness import RankCompleteness
from syncpace.trace.validate.rows import Quarantine


class StreamRead(Protocol):
    """What a stream read to its end tells the account (:class:`Stream`, or
    the segments of a rank's rotated events read as one)."""

    path: Path
    rows: int
    cut: str | None
    has_eos: bool
    corrupt_rows: int
    corrupt_batches: list[Any]

    def unvouched(self, what: str) -> str | None: ...


def account_rank(
    rank: int,
    meta: dict[str, Any],
    stem: Path,
    events: tuple[StreamRead, Quarantine],
    steps: tuple[StreamRead, Quarantine],
    warnings: list[str],
) -> RankCompleteness:
    """Check what the metadata declares against what the streams held (read to their
    end) and what was quarantined; warn of every gap, and account for the rank."""
    (ev_stream, ev_bad), (st_stream, st_bad) = events, steps
    for bad, stream, what in ((ev_bad, ev_stream, "events"), (st_bad, st_stream, "steps")):
        if stream.corrupt_batches:
            warnings.append(
                f"{stream.path}: batch(es) {', '.join(map(str, stream.corrupt_batches[:5]))} "
                f"fail their checksum: {stream.corrupt_rows:,} {what} left out"
            )
        unvouched = stream.unvouched(what) if expects_checksums(meta) else None
        if unvouched:
            warnings.append(unvouched)
        if bad.rows:
            warnings.append(
                f"{stream.path}: {bad.rows:,} of {stream.rows:,} {what} left out as invalid "
                f"({bad.describe()})"
            )
    finished = meta.get("finished") is True
    cut = []
    rotated = int((meta.get("segments") or {}).get("removed_events", 0))
    written = meta.get("events_written")
    declared = {
        "events": written - rotated if written is not None else None,
        "steps": meta.get("steps_written"),
    }
    for stream, what in ((ev_stream, "events"), (st_stream, "steps")):
        expected = declared[what] if finished else None
        if stream.cut:
            cut.append(what)
        elif finished and not stream.has_eos:
            cut.append(what)
            warnings.append(
                f"{stream.path}: ends without its end-of-stream marker although rank {rank} "
                f"finished: the stream was cut at a batch boundary"
            )
        if expected is not None and stream.rows != expected:
            relation = "fewer" if stream.rows < expected else "more"
            warnings.append(
                f"{stream.path}: {stream.rows:,} {what} found, {relation} than the "
                f"{expected:,} the metadata declares"
            )
    write_error = meta.get("write_error")
    if write_error:
        warnings.append(
            f"{stem}{schema.META_SUFFIX}: rank {rank} stopped writing its trace "
            f"({write_error}); what came after is not in the trace"
        )
    return RankCompleteness(
        rank=rank,
        finished=finished,
        events_declared=declared["events"] if finished else None,
        events_found=ev_stream.rows,
        events_invalid=ev_bad.rows,
        events_dropped=int(meta.get("dropped_events") or 0),
        steps_declared=declared["steps"] if finished else None,
        steps_found=st_stream.rows,
        steps_invalid=st_bad.rows,
        cut=tuple(cut),
        write_error=write_error,
        events_rotated=rotated,
        invalid_reasons={
            **{f"events: {k}": v for k, v in ev_bad.reasons.items()},
            **{f"steps: {k}": v for k, v in st_bad.reasons.items()},
        },
    )


def rank_warnings(rank: int, meta: dict[str, Any], stem: Path) -> list[str]:
    """What a rank's metadata says went wrong: it did not finish, it dropped events."""
    out = []
    if not meta.get("finished", False):
        out.append(f"{stem}{schema.META_SUFFIX}: rank {rank} did not finish cleanly")
    if meta.get("dropped_events"):
        why = "after it stopped writing" if meta.get("write_error") else "(buffer full)"
        out.append(
            f"{stem}{schema.META_SUFFIX}: rank {rank} dropped {meta['dropped_events']} events {why}"
        )
    return out
