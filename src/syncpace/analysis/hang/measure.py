"""The measurement: for each process group the first call some member entered and did
not complete, every member placed there; mismatches and skipped calls.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any

import polars as pl

from syncpace.analysis.hang.inputs import HangInput
from syncpace.analysis.hang.points import (
    FAILED,
    OPEN,
    HangAnalysis,
    HangPoint,
    Mismatch,
    RankAt,
    Skip,
)
from syncpace.analysis.hang.stacks import trim, where_of
from syncpace.trace.stall import Call, Frame, StallRecord

#: Point-to-point ops: their sequence numbers count per (group, peer pair).
P2P_OPS = ("send", "recv")
#: Ops whose per-rank message size may legitimately differ (uneven splits, root-only
#: buffers): their sizes are not compared.
_UNEVEN = ("all_to_all", "scatter", "gather")
#: Errors that say a peer's process or connection is gone.
_PEER_GONE = re.compile(
    r"closed by peer|reset by peer|connection (closed|reset|refused)|broken pipe|"
    r"remote (process|peer) (exited|died)|peer .* (died|exited)|socket closed",
    re.IGNORECASE,
)


def _call(row: dict[str, Any]) -> Call:
    return Call(
        group=row["group"],
        seq=int(row["seq"]),
        op=row["op"],
        bytes=int(row["bytes"]),
        dtype=row["dtype"] or "",
        step=int(row["step"]) if row["step"] is not None else -1,
        enter_ns=int(row["enter_ns"]),
        exit_ns=int(row["exit_ns"]),
        status=row["status"],
        error=row["error"],
    )


def _observed_until(inp: HangInput) -> int:
    calls = inp.calls
    latest = [r.written_ns for r in inp.stalls.values()]
    if calls.height:
        latest.append(int(calls["enter_ns"].max()))  # type: ignore[arg-type]
        latest.append(int(calls["exit_ns"].max()))  # type: ignore[arg-type]
    return max(latest) if latest else -1


def mismatches(calls: pl.DataFrame) -> list[tuple[str, Mismatch]]:
    """The first (group, seq) per group whose calls disagree on op, size or dtype."""
    if calls.height == 0:
        return []
    sized = pl.when(pl.col("op").is_in(_UNEVEN)).then(pl.lit(-1)).otherwise(pl.col("bytes"))
    by = (
        calls.with_columns(sized.alias("_bytes"))
        .group_by("group", "seq")
        .agg(
            pl.col("op").n_unique().alias("n_op"),
            pl.col("_bytes").n_unique().alias("n_bytes"),
            pl.col("dtype").n_unique().alias("n_dtype"),
            pl.len().alias("n"),
        )
        .filter(
            (pl.col("n") > 1)
            & ((pl.col("n_op") > 1) | (pl.col("n_bytes") > 1) | (pl.col("n_dtype") > 1))
        )
        .sort("group", "seq")
    )
    out = []
    for row in by.group_by("group", maintain_order=True).first().iter_rows(named=True):
        group, seq = row["group"], row["seq"]
        at = calls.filter((pl.col("group") == group) & (pl.col("seq") == seq))
        for name, n in (("op", row["n_op"]), ("bytes", row["n_bytes"]), ("dtype", row["n_dtype"])):
            if n > 1:
                sides = (
                    at.group_by(name)
                    .agg(pl.col("rank").sort())
                    .sort(pl.col("rank").list.len(), descending=True)
                )
                out.append(
                    (
                        str(group),
                        Mismatch(
                            int(seq),
                            name,
                            tuple(
                                (str(v), tuple(int(r) for r in ranks))
                                for v, ranks in sides.iter_rows()
                            ),
                        ),
                    )
                )
                break
    return out


def skip_of(calls: pl.DataFrame, group: str, upto: int) -> Skip | None:
    """Ranks whose calls of ``group`` (up to seq ``upto``) sit in a different iteration
    than the others' at the same seq: where they skipped or added a call."""
    g = calls.filter((pl.col("group") == group) & (pl.col("seq") <= upto) & (pl.col("step") >= 0))
    if g.height == 0 or g["step"].n_unique() < 2:
        return None
    odd = (
        g.group_by("seq")
        .agg(pl.col("step").n_unique().alias("n"), pl.len().alias("m"))
        .filter((pl.col("n") > 1) & (pl.col("m") > 1))
        .sort("seq")
    )
    if odd.height == 0:
        return None
    seq = int(odd["seq"][0])
    at = g.filter(pl.col("seq") == seq)
    sides = at.group_by("step").agg(pl.col("rank")).sort(pl.col("rank").list.len(), descending=True)
    if sides.height < 2 or sides["rank"][0].len() == sides["rank"][1].len():
        return None
    majority_step = int(sides["step"][0])
    ranks = tuple(sorted(int(r) for s in sides["rank"].to_list()[1:] for r in s))
    # The iteration where the odd ranks issued a different number of calls.
    counts = g.group_by("rank", "step").agg(pl.len().alias("n"))
    steps = sorted(set(counts["step"].to_list()))
    for step in steps:
        if step > majority_step:
            break
        here = counts.filter(pl.col("step") == step)
        normal = here.filter(~pl.col("rank").is_in(ranks))["n"]
        if normal.len() == 0:
            continue
        expected = int(normal.mode().sort()[-1])
        odd_counts = {
            int(r): int(n)
            for r, n in here.filter(pl.col("rank").is_in(ranks)).select("rank", "n").iter_rows()
        }
        differing = {r: n for r, n in odd_counts.items() if n != expected}
        missing = [r for r in ranks if r not in odd_counts]
        for r in missing:
            differing[r] = 0
        if differing:
            return Skip(seq, int(step), tuple(sorted(differing)), differing, expected)
    return Skip(seq, majority_step, ranks, {}, 0)


def _frames_of(rec: StallRecord | None, group: str, seq: int | None) -> tuple[Frame, ...]:
    """The issuing stack of a call a stall record lists (Flight Recorder keeps one per
    call): the call at (group, seq), or with ``seq`` None the rank's latest call."""
    if rec is None:
        return ()
    known = [*rec.in_flight, *rec.last_completed.values()]
    if rec.failed is not None:
        known.append(rec.failed)
    if seq is not None:
        return next((c.frames for c in known if (c.group, c.seq) == (group, seq)), ())
    latest = max((c for c in known if c.frames), key=lambda c: c.enter_ns, default=None)
    return latest.frames if latest is not None else ()


def _stack(rec: StallRecord | None, group: str, seq: int | None) -> tuple[tuple[Frame, ...], str]:
    """The most telling stack of a rank: its main thread's from a stall record, else the
    stack that issued the call (Flight Recorder)."""
    if rec is not None and rec.source != "flight_recorder":
        main = rec.main_thread
        if main is not None and main.frames:
            return trim(main.frames), "stall record"
    frames = trim(_frames_of(rec, group, seq))
    if frames:
        what = "the call" if seq is not None else "its last call"
        return frames, f"stack of {what} (Flight Recorder)"
    return (), ""


def _place(
    inp: HangInput,
    rank: int,
    group: str,
    seq: int,
    last_call: Call | None,
    failed_at: int,
) -> RankAt:
    """What a member that did not enter (group, seq) is doing. ``failed_at`` is when the
    first waiting rank lost its connection to a peer (-1 if none did)."""
    host = inp.host(rank)
    if rank not in inp.present:
        return RankAt(rank, host, "absent", last_call=last_call, detail="no trace, no stall record")
    rec = inp.stalls.get(rank)
    stack, source = _stack(rec, group, None)
    where, seen = where_of(stack), rec.written_ns if rec is not None else -1
    place = {"last_call": last_call, "where": where, "stack": stack, "stack_source": source}
    if (inp.meta.get(rank) or {}).get("finished", False):
        detail = "closed its trace cleanly without entering the call"
        return RankAt(rank, host, "exited", seen_ns=seen, detail=detail, **place)
    if rec is not None and rec.kind == "fatal":
        detail = rec.source.removeprefix("faulthandler: ") or "a fatal signal"
        return RankAt(rank, host, "died", seen_ns=seen, detail=detail, **place)
    alive_after = rec is not None and rec.state != "resolved" and seen > failed_at
    if failed_at >= 0 and not alive_after:
        detail = "the waiting ranks lost their connection to a peer: this rank's process is gone"
        return RankAt(rank, host, "died", seen_ns=seen, detail=detail, **place)
    if rec is None:
        detail = "no stall record and no call since its last one: frozen, dead, or unwatched"
        return RankAt(rank, host, "silent", detail=detail, **place)
    if rec.state == "resolved":
        detail = "its last stall ended: it made progress after the others began to wait"
        return RankAt(rank, host, "progressing", seen_ns=seen, detail=detail, **place)
    other = next((c for c in rec.in_flight if (c.group, c.seq) != (group, seq)), None)
    if other is not None:
        detail = f"in flight: {other.op} seq {other.seq} of group {other.group}"
    elif rec.source == "flight_recorder":
        detail = "nothing in flight in its Flight Recorder dump (which holds no current stack)"
    else:
        detail = "busy outside communication: nothing in flight"
    return RankAt(rank, host, "stuck", call=other, seen_ns=seen, detail=detail, **place)


def _point(inp: HangInput, group: str, seq: int, observed_until: int) -> HangPoint | None:
    calls = inp.calls
    g = calls.filter(pl.col("group") == group)
    members = inp.groups.get(group) or tuple(sorted(set(g["rank"].to_list())))
    here = g.filter(pl.col("seq") == seq)
    at = {int(r["rank"]): _call(r) for r in here.iter_rows(named=True)}
    done_after = g.filter((pl.col("seq") > seq) & (pl.col("status") == "completed"))
    if set(done_after["rank"].to_list()) >= (set(members) & inp.present):
        return None  # everyone went past it: an old failure the job recovered from
    open_calls = [c for c in at.values() if c.status in OPEN]
    since = min((c.enter_ns for c in open_calls if c.enter_ns >= 0), default=-1)
    gone = [c.exit_ns for c in at.values() if c.error and _PEER_GONE.search(c.error)]
    failed_at = min(gone) if gone else -1
    before = g.filter(pl.col("seq") < seq).sort("seq").group_by("rank").last()
    last = {int(r["rank"]): _call(r) for r in before.iter_rows(named=True)}
    ranks = []
    for rank in members:
        call = at.get(rank)
        if call is None:
            ranks.append(_place(inp, rank, group, seq, last.get(rank), failed_at))
            continue
        rec = inp.stalls.get(rank)
        if call.status == "pending" and rec is not None and rec.kind == "fatal":
            # killed by a fatal signal inside the call: its crash journal held the call
            placed = _place(inp, rank, group, seq, last.get(rank), failed_at)
            ranks.append(replace(placed, call=call))
            continue
        stack, source = _stack(rec, group, seq)
        ranks.append(
            RankAt(
                rank,
                inp.host(rank),
                "completed" if call.done else "waiting",
                call=call,
                last_call=last.get(rank),
                where=where_of(stack),
                stack=stack,
                stack_source=source,
                seen_ns=rec.written_ns if rec is not None else -1,
            )
        )
    # The call as most ranks issued it (a desync's odd side is the exception).
    common = Counter((c.op, c.bytes, c.dtype) for c in at.values()).most_common(1)[0][0]
    ref = next(c for c in at.values() if (c.op, c.bytes, c.dtype) == common)
    stalled = bool(here["stalled"].any()) or any(c.status in FAILED for c in open_calls)
    return HangPoint(
        group=group,
        seq=seq,
        op=ref.op,
        bytes=ref.bytes,
        dtype=ref.dtype,
        members=tuple(members),
        ranks=tuple(ranks),
        since_ns=since,
        observed_until_ns=observed_until,
        stalled=stalled,
    )


def p2p_points(inp: HangInput, observed_until: int) -> list[HangPoint]:
    """Point-to-point waits a stall record shows (a pipeline stage's ``recv`` from a peer
    that never sends): one point per waiting call whose peer has no matching call in
    flight, the peer placed like a rank that never entered a collective."""
    points = []
    for rank, rec in sorted(inp.stalls.items()):
        if rec.state == "resolved":
            continue
        for call in rec.in_flight:
            if call.peer < 0 or call.op not in P2P_OPS:
                continue
            other = inp.stalls.get(call.peer)
            counterpart = P2P_OPS[1 - P2P_OPS.index(call.op)]
            matched = other is not None and any(
                c.peer == rank and c.op == counterpart and c.group == call.group
                for c in other.in_flight
            )
            if matched:
                continue  # both sides are in it: the transfer itself is stuck
            stack, source = _stack(rec, call.group, call.seq)
            waiting = RankAt(
                rank,
                inp.host(rank),
                "waiting",
                call=call,
                where=where_of(stack),
                stack=stack,
                stack_source=source,
                seen_ns=rec.written_ns,
            )
            gone = call.exit_ns if call.error and _PEER_GONE.search(call.error) else -1
            peer = _place(inp, call.peer, call.group, -1, None, gone)
            points.append(
                HangPoint(
                    group=call.group,
                    seq=call.seq,
                    op=call.op,
                    bytes=call.bytes,
                    dtype=call.dtype,
                    members=tuple(sorted((rank, call.peer))),
                    ranks=(waiting, peer) if rank < call.peer else (peer, waiting),
                    since_ns=call.enter_ns,
                    observed_until_ns=observed_until,
                    stalled=True,
                )
            )
    return points


def analyze_hang(inp: HangInput) -> HangAnalysis:
    """Every group's hang point (the root first: the one whose wait began first)."""
    calls = inp.calls
    found = mismatches(calls)
    observed_until = _observed_until(inp)
    points = []
    if calls.height:
        first_open = (
            calls.filter(pl.col("status").is_in(OPEN))
            .group_by("group")
            .agg(pl.col("seq").min().alias("seq"))
            .sort("group")
        )
        for group, seq in first_open.iter_rows():
            point = _point(inp, str(group), int(seq), observed_until)
            if point is None:
                continue
            mismatch = next((m for g, m in found if g == group and m.seq <= seq), None)
            point = _with(point, mismatch, skip_of(calls, str(group), int(seq)))
            points.append(point)
    points.extend(p2p_points(inp, observed_until))
    points.sort(key=lambda p: (not p.stalled, p.since_ns if p.since_ns >= 0 else 1 << 62))
    used = {(p.group, p.mismatch.seq) for p in points if p.mismatch}
    notes = []
    if not inp.stalls and inp.source == "trace":
        notes.append("no stall records: the watchdog did not fire (or is off)")
    return HangAnalysis(
        points=tuple(points),
        mismatches=tuple((g, m) for g, m in found if (g, m.seq) not in used),
        world_size=inp.world_size,
        run=inp.run,
        source=inp.source,
        stall_records=len(inp.stalls),
        notes=tuple(notes),
    )


def _with(point: HangPoint, mismatch: Mismatch | None, skip: Skip | None) -> HangPoint:
    return HangPoint(
        **{
            k: getattr(point, k)
            for k in point.__dataclass_fields__
            if k not in ("mismatch", "skip")
        },
        mismatch=mismatch,
        skip=skip,
    )
