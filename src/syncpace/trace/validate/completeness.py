"""The account of every rank: what its files declare against what they hold — declared,
found, quarantined, dropped (buffer full), cut — and the lines every verb prints of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankCompleteness:
    """What one rank's files declare and what they hold."""

    rank: int
    finished: bool
    events_declared: int | None  # events_written in the metadata (a finished rank)
    events_found: int  # rows in the complete batches of the stream
    events_invalid: int  # of those, quarantined
    events_dropped: int  # never written: the in-job buffer was full
    steps_declared: int | None
    steps_found: int
    steps_invalid: int
    cut: tuple[str, ...] = ()  # the streams that ended early ("events", "steps")
    write_error: str | None = None  # why the rank stopped writing, when it said so
    invalid_reasons: dict[str, int] = field(default_factory=dict)
    #: From a dead rank's crash journal: completed (or failed) calls and steps its
    #: streams lack, and calls still in flight when it died (status ``pending``).
    events_recovered: int = 0
    steps_recovered: int = 0
    calls_pending: int = 0
    #: Written, then removed by design: old segments of a rotated (always-on) trace.
    events_rotated: int = 0

    @property
    def events_missing(self) -> int:
        """Declared but not found (a stream cut short, rows removed)."""
        declared = self.events_declared
        return max(declared - self.events_found, 0) if declared is not None else 0

    @property
    def steps_missing(self) -> int:
        declared = self.steps_declared
        return max(declared - self.steps_found, 0) if declared is not None else 0

    @property
    def events_kept(self) -> int:
        return self.events_found - self.events_invalid + self.events_recovered + self.calls_pending

    @property
    def steps_kept(self) -> int:
        return self.steps_found - self.steps_invalid + self.steps_recovered

    @property
    def lossy(self) -> bool:
        return bool(
            not self.finished
            or self.events_missing
            or self.steps_missing
            or self.events_invalid
            or self.steps_invalid
            or self.events_dropped
            or self.cut
            or self.write_error
            or (self.events_declared is not None and self.events_found > self.events_declared)
            or (self.steps_declared is not None and self.steps_found > self.steps_declared)
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cut"] = list(self.cut)
        data["events_missing"] = self.events_missing
        data["steps_missing"] = self.steps_missing
        data["lossy"] = self.lossy
        return data


def completeness_lines(
    completeness: dict[int, RankCompleteness], missing_ranks: list[int], world_size: int
) -> list[str]:
    """One line for the whole trace and one per rank that lost something: what every
    verb prints about loss. Nothing for a trace that carries no account (one built in
    memory rather than read from files)."""
    if not completeness:
        return []
    ranks = list(completeness.values())
    declared = [c.events_declared for c in ranks]
    found = sum(c.events_found for c in ranks)
    kept = sum(c.events_kept for c in ranks)
    steps_found = sum(c.steps_found for c in ranks)
    steps_kept = sum(c.steps_kept for c in ranks)
    dropped = sum(c.events_dropped for c in ranks)
    whole = all(d is not None for d in declared) and ranks
    head = f"completeness: {len(ranks)} of {world_size} ranks"
    if whole and kept == found == sum(d or 0 for d in declared) and steps_kept == steps_found:
        # nothing lost: one short line
        lines = [f"{head}, all {kept:,} events and {steps_kept:,} steps kept"]
        if dropped:
            lines.append(f"  {dropped:,} events dropped in the job")
    else:
        # each count on a line of its own, short enough for an 80-column terminal
        events = f"  events: {kept:,} kept of {found:,} found"
        if whole:
            events += f" ({sum(d or 0 for d in declared):,} declared)"
        else:
            events += (
                f" ({sum(1 for d in declared if d is None)} ranks declared no count: unfinished)"
            )
        steps = f"  steps: {steps_kept:,} kept of {steps_found:,} found"
        if dropped:
            steps += f"; {dropped:,} events dropped in the job"
        lines = [head, events, steps]
    if missing_ranks:
        lines.append(f"  ranks without any file: {ranges(missing_ranks)}")
    for c in ranks:
        if not c.lossy:
            continue
        parts = []
        if not c.finished:
            parts.append("did not finish")
        if c.write_error:
            parts.append(f"stopped writing: {c.write_error}")
        if c.events_declared is not None and c.events_found != c.events_declared:
            parts.append(f"events {c.events_found:,} found of {c.events_declared:,} declared")
        if c.steps_declared is not None and c.steps_found != c.steps_declared:
            parts.append(f"steps {c.steps_found:,} found of {c.steps_declared:,} declared")
        if c.cut:
            parts.append(f"cut: {', '.join(c.cut)}")
        if c.events_dropped:
            parts.append(f"{c.events_dropped:,} events dropped (buffer full)")
        if c.events_invalid:
            parts.append(f"{c.events_invalid:,} events invalid")
        if c.steps_invalid:
            parts.append(f"{c.steps_invalid:,} steps invalid")
        if c.events_recovered or c.steps_recovered or c.calls_pending:
            parts.append(
                f"{c.events_recovered:,} events and {c.steps_recovered:,} steps recovered "
                f"from its crash journal, {c.calls_pending:,} calls in flight"
            )
        lines.append(f"  rank {c.rank}: " + "; ".join(parts))
    return lines


def ranges(values: list[int], dash: str = "-") -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"`` (sorted, distinct values): readable rank lists."""
    if not values:
        return ""
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}{dash}{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)
