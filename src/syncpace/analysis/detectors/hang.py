"""Hang and desync findings: one critical finding that says who the job waits for.

Judges the measurement of :mod:`syncpace.analysis.hang.measure`: a group's hang point is a hang
when a watchdog, a Flight Recorder dump or a failed call says ranks were stuck or
failed there, or when ranks waited in it longer than ``hang_wait_s``. Calls that
disagree at the same (group, seq) make it a desync. The finding names the ranks the
others wait for, what those are doing (their stack), the ranks that wait and since
when, and what to do.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from syncpace.analysis.detectors import advice
from syncpace.analysis.detectors.advice import rank_list
from syncpace.analysis.detectors.context import Context
from syncpace.analysis.findings import Finding, Severity
from syncpace.analysis.hang.points import HangAnalysis, HangPoint, Mismatch, RankAt
from syncpace.trace.stall import Call

#: Stack frames a finding's evidence keeps per rank (innermost ones).
STACK_FRAMES = 24
#: The source location some backends put before their message (gloo: "[…/pair.cc:553] ").
_LOCATION = re.compile(r"^(\w+: )?\[[^\]]*\]\s*")


def short_error(error: str | None) -> str:
    """An error as one short line: no source-location prefix, at most 160 characters."""
    if not error:
        return ""
    text = _LOCATION.sub(lambda m: m.group(1) or "", error.strip())
    return text if len(text) <= 160 else text[:157] + "..."


def clock(ns: int) -> str:
    """``ns`` (rank 0's clock, which is wall-clock based) as ``HH:MM:SS UTC``."""
    if ns < 0:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%H:%M:%S UTC")


def _call_text(c: Call | None) -> str:
    if c is None:
        return "no call (none was flushed)"
    return f"{c.op} seq {c.seq} of group {c.group} at {clock(c.enter_ns)} ({c.status})"


def _is_hang(point: HangPoint, wait_ns: float) -> bool:
    if not point.waiting and not point.missing:
        return False
    return point.stalled or (bool(point.waiting) and point.waited_ns >= wait_ns)


def _who(r: RankAt) -> str:
    return f"rank {r.rank}" + (f" (node {r.host})" if r.host else "")


def _doing(r: RankAt) -> str:
    where = r.where or "an unknown place"
    if r.state == "stuck":
        if r.call is not None:
            return f"it waits in {r.call.op} seq {r.call.seq} of group {r.call.group} ({where})"
        return f"it is in {where}"
    if r.state == "died":
        if r.detail.startswith("Fatal Python error"):
            return f"its process died ({r.detail}) in {where}"
        if r.seen_ns >= 0:
            return f"its process died (last seen {clock(r.seen_ns)} in {where})"
        if r.last_call is None:
            return "its process died before its trace held any call"
        return f"its process died (its trace ends at {_call_text(r.last_call)})"
    if r.state == "silent":
        return f"it went silent after {_call_text(r.last_call)}: frozen or dead"
    if r.state == "exited":
        return "it finished and closed its trace"
    if r.state == "progressing":
        return f"it moved on ({where})"
    return "it left no trace in these directories"


def _mismatch_text(m: Mismatch, op_of: dict[int, str]) -> str:
    unit = {"bytes": " B", "op": "", "dtype": ""}[m.field]
    sides = [f"{rank_list(r)}: {v}{unit}" for v, r in m.sides]
    return f"{m.field} differs at seq {m.seq} ({'; '.join(sides)})"


def _waiting_text(point: HangPoint, others: bool) -> str:
    waiting = point.waiting
    if not waiting:
        return ""
    who = ("the other " if others else "") + (
        f"{len(waiting)} ranks" if len(waiting) > 1 else rank_list([waiting[0].rank])
    )
    if len(waiting) <= 4:
        who = ("the others, " if others else "") + rank_list([r.rank for r in waiting])
    failed = point.failed
    if failed and len(failed) == len(waiting):
        errors = {short_error(r.call.error) for r in failed if r.call is not None and r.call.error}
        error = f" with '{sorted(errors)[0]}'" if errors else ""
        return f"{who} failed there{error} after waiting since {clock(point.since_ns)}"
    return f"{who} wait there since {clock(point.since_ns)} ({point.waited_ns / 1e9:.1f} s)"


def _summary(point: HangPoint, mode: str) -> str:
    call = f"{point.op} seq {point.seq} of group {point.group}"
    missing, waiting = point.missing, point.waiting
    if point.op in ("send", "recv") and waiting and missing:
        w, m = waiting[0], missing[0]
        want = "send" if point.op == "recv" else "receive"
        return (
            f"{_who(w)} waits in {point.op} {'from' if point.op == 'recv' else 'to'} rank "
            f"{m.rank} (seq {point.seq} of that pair in group {point.group}) since "
            f"{clock(point.since_ns)} ({point.waited_ns / 1e9:.1f} s); {_who(m)} does not "
            f"{want} it: {_doing(m)}"
        )
    parts = []
    if mode == "desync" and point.mismatch is not None:
        m = point.mismatch
        culprit = m.minority
        values = ", ".join(f"{v} on {rank_list(r)}" for v, r in m.sides)
        parts.append(f"ranks disagree at seq {m.seq} of group {point.group}: {m.field} {values}")
        at = [r for r in point.ranks if r.rank in culprit and r.where]
        if at:
            parts.append(f"{_who(at[0])} is at {at[0].where}")
    if missing:
        first = missing[0]
        more = f" (and {rank_list([r.rank for r in missing[1:]])})" if len(missing) > 1 else ""
        verb = {
            "died": "left no record of entering",
            "silent": "went silent before",
            "absent": "left no trace of",
        }.get(first.state, "never entered")
        parts.append(f"{_who(first)}{more} {verb} {call}: {_doing(first)}")
    elif mode == "hang":
        parts.append(
            f"all {len(waiting)} ranks are inside {call} and none is missing: the collective "
            "itself does not complete"
        )
    text = _waiting_text(point, others=bool(missing))
    if text:
        parts.append(text)
    if point.skip is not None and point.skip.counts:
        s = point.skip
        counts = ", ".join(f"{n}" for n in s.counts.values())
        parts.append(
            f"{rank_list(list(s.ranks))} issued {counts} calls in step {s.step} where the others "
            f"issued {s.expected}"
        )
    return "; ".join(parts)


def _stack_json(r: RankAt, role: str) -> dict[str, Any]:
    frames = r.stack[-STACK_FRAMES:]
    return {
        "rank": r.rank,
        "host": r.host,
        "state": r.state,
        "role": role,
        "source": r.stack_source,
        "where": r.where,
        "frames": [str(f) for f in frames],
        "code": [f.code for f in frames],
    }


def _evidence(analysis: HangAnalysis, point: HangPoint, culprits: set[int]) -> dict[str, Any]:
    waiting = point.waiting
    blamed = [r for r in point.ranks if r.rank in culprits and r.stack]
    rep = next((r for r in waiting if r.stack and r.rank not in culprits), None)
    return {
        "group": point.group,
        "seq": point.seq,
        "op": point.op,
        "bytes": point.bytes,
        "dtype": point.dtype,
        "members": list(point.members),
        "since_ns": point.since_ns,
        "since": clock(point.since_ns),
        "waited_s": round(point.waited_ns / 1e9, 3),
        "observed_until_ns": point.observed_until_ns,
        "waiting": [r.rank for r in waiting],
        "failed": [r.rank for r in point.failed],
        "completed": [r.rank for r in point.of("completed")],
        "missing": [
            {
                "rank": r.rank,
                "host": r.host,
                "state": r.state,
                "where": r.where,
                "detail": r.detail,
                "doing": _doing(r),
                "last_call": r.last_call.to_json() if r.last_call else None,
                "seen_ns": r.seen_ns,
            }
            for r in point.missing
        ],
        "waiting_detail": [
            {
                "rank": r.rank,
                "host": r.host,
                "status": r.call.status if r.call else "",
                "since_ns": r.call.enter_ns if r.call else -1,
                "op": r.call.op if r.call else "",
                "bytes": r.call.bytes if r.call else 0,
                "error": short_error(r.call.error) if r.call else None,
                "where": r.where,
            }
            for r in waiting
        ],
        "stacks": [_stack_json(r, "culprit") for r in blamed[:8]]
        + ([_stack_json(rep, "waiting")] if rep is not None else []),
        "mismatch": point.mismatch.to_json() if point.mismatch else None,
        "skip": point.skip.to_json() if point.skip else None,
        "other_groups": [
            {
                "group": p.group,
                "seq": p.seq,
                "op": p.op,
                "waiting": [r.rank for r in p.waiting],
                "missing": [r.rank for r in p.missing],
                "since_ns": p.since_ns,
            }
            for p in analysis.points
            if p is not point
        ],
        "source": analysis.source,
        "stall_records": analysis.stall_records,
        "notes": list(analysis.notes),
    }


def finding_of(analysis: HangAnalysis, wait_s: float, run: str = "") -> Finding | None:
    """The one hang or desync finding of ``analysis`` (``None`` when the job did not
    stop and its calls agree)."""
    points = [p for p in analysis.points if _is_hang(p, wait_s * 1e9)]
    if points:
        point = points[0]
        mode = "desync" if point.mismatch is not None else "hang"
        culprits = {r.rank for r in point.missing}
        if point.mismatch is not None:
            culprits |= set(point.mismatch.minority)
        if not culprits:
            culprits = {r.rank for r in point.waiting}
        nodes = sorted({r.host for r in point.ranks if r.rank in culprits and r.host})
        confidence = 1.0 if point.stalled else 0.7
        return Finding(
            mode=mode,
            severity=Severity.CRITICAL,
            confidence=confidence,
            summary=_summary(point, mode),
            cost=1.0,
            ranks=tuple(sorted(culprits)),
            nodes=tuple(nodes),
            evidence=_evidence(analysis, point, culprits),
            actions=advice.hang(point) if mode == "hang" else advice.desync(point),
            run=run or analysis.run,
        )
    if analysis.mismatches:
        group, m = analysis.mismatches[0]
        values = ", ".join(f"{v} on {rank_list(r)}" for v, r in m.sides)
        return Finding(
            mode="desync",
            severity=Severity.CRITICAL,
            confidence=1.0,
            summary=f"ranks disagree at seq {m.seq} of group {group}: {m.field} {values}",
            cost=0.0,
            ranks=tuple(sorted(m.minority)),
            evidence={"group": group, "mismatch": m.to_json(), "source": analysis.source},
            actions=advice.desync(None),
            run=run or analysis.run,
        )
    return None


def hang_or_desync(ctx: Context) -> list[Finding]:
    analysis = ctx.metrics.hang
    if analysis is None:
        return []
    found = finding_of(analysis, ctx.thresholds.hang_wait_s, ctx.metrics.run)
    return [found] if found is not None else []
