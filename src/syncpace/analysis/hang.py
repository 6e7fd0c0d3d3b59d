"""Hangs and desyncs measured: where each process group stopped, and who it waits for.

The input (:class:`HangInput`) is every collective call each rank recorded (the trace's
events, whatever status they ended with) plus what the stall records add: the calls in
flight when a rank stalled, the last completed call per group, and the stacks of every
thread. Flight Recorder dumps arrive in the same shape
(:mod:`syncpace.importers.flight_recorder`).

For each process group the *hang point* is the first sequence number some member
entered and did not complete. Every member is then placed: it **completed** that call,
it **waits** in it (in flight, failed, timed out), it **never entered** it (and then
what it is doing: its stack, its last call, whether it died), or it left **no trace**
at all. Calls at the same (group, seq) that disagree on op, size or dtype are a
**mismatch**; sequence numbers whose iteration differs across ranks locate a skipped
call. Judgement (is it a hang, who is to blame, what to do) lives in
:mod:`syncpace.analysis.detectors.hang`; this module only measures.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from syncpace.trace.reader import Trace
from syncpace.trace.stall import Call, Frame, StallRecord

#: Columns of :attr:`HangInput.calls` (collective calls only; point-to-point calls
#: have their own sequence numbers per peer pair and are left out).
CALL_COLUMNS = (
    "rank",
    "group",
    "seq",
    "op",
    "bytes",
    "dtype",
    "step",
    "enter_ns",
    "exit_ns",
    "status",
    "error",
    "stalled",
)
_SCHEMA = {
    "rank": pl.Int64,
    "group": pl.Utf8,
    "seq": pl.Int64,
    "op": pl.Utf8,
    "bytes": pl.Int64,
    "dtype": pl.Utf8,
    "step": pl.Int64,
    "enter_ns": pl.Int64,
    "exit_ns": pl.Int64,
    "status": pl.Utf8,
    "error": pl.Utf8,
    "stalled": pl.Boolean,
}
#: Point-to-point ops: their sequence numbers count per (group, peer pair).
P2P_OPS = ("send", "recv")
#: Statuses of a call that was entered and did not complete.
OPEN = ("in_flight", "pending", "failed", "timed_out", "aborted")
FAILED = ("failed", "timed_out", "aborted")
#: Ops whose per-rank message size may legitimately differ (uneven splits, root-only
#: buffers): their sizes are not compared.
_UNEVEN = ("all_to_all", "scatter", "gather")
#: Errors that say a peer's process or connection is gone.
_PEER_GONE = re.compile(
    r"closed by peer|reset by peer|connection (closed|reset|refused)|broken pipe|"
    r"remote (process|peer) (exited|died)|peer .* (died|exited)|socket closed",
    re.IGNORECASE,
)
#: Frames of the tracer itself and of Python's threading machinery are not "where".
_NOT_WHERE = re.compile(r"[/\\]syncpace[/\\]capture[/\\]|[/\\]threading\.py$")
_LIBRARY = re.compile(r"[/\\](site-packages|dist-packages|lib[/\\]python\d)[/\\]")


@dataclass(frozen=True)
class HangInput:
    run: str
    world_size: int
    calls: pl.DataFrame
    stalls: dict[int, StallRecord]
    meta: dict[int, dict[str, Any]]
    groups: dict[str, tuple[int, ...]]
    source: str = "trace"

    def host(self, rank: int) -> str:
        meta = self.meta.get(rank) or {}
        stall = self.stalls.get(rank)
        return str(meta.get("host") or (stall.host if stall else "") or "")

    @property
    def present(self) -> set[int]:
        return set(self.meta) | set(self.stalls)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)


def _call_row(rank: int, c: Call, stalled: bool) -> dict[str, Any]:
    return {
        "rank": rank,
        "group": c.group,
        "seq": c.seq,
        "op": c.op,
        "bytes": c.bytes,
        "dtype": c.dtype,
        "step": c.step,
        "enter_ns": c.enter_ns,
        "exit_ns": c.exit_ns,
        "status": c.status,
        "error": c.error,
        "stalled": stalled,
    }


def stall_calls(stalls: dict[int, StallRecord]) -> pl.DataFrame:
    """The calls the stall records know of: in flight, failed, last completed."""
    rows = []
    for rank, rec in stalls.items():
        stalled = rec.state in ("stalled", "failed")
        for c in rec.in_flight:
            if c.peer < 0:
                rows.append(_call_row(rank, c, stalled))
        if rec.failed is not None and rec.failed.peer < 0:
            rows.append(_call_row(rank, rec.failed, False))
        for c in rec.last_completed.values():
            if c.peer < 0:
                rows.append(_call_row(rank, c, False))
    return _frame(rows)


def hang_input(trace: Trace) -> HangInput:
    """The hang diagnosis' input from a loaded trace and its stall records."""
    sources = {str(m.get("source", "")) for m in trace.meta.values()}
    source = "flight_recorder" if sources == {"flight_recorder"} else "trace"
    events = trace.events
    recorded = (
        events.filter((pl.col("peer") < 0) & (pl.col("seq") >= 0))
        .select(
            pl.col("rank").cast(pl.Int64),
            "group",
            "seq",
            "op",
            "bytes",
            "dtype",
            "step",
            "enter_ns",
            "exit_ns",
            "status",
            "error",
            pl.lit(False).alias("stalled"),
        )
        .cast(_SCHEMA)  # type: ignore[arg-type]
        if events.height
        else _frame([])
    )
    stalls = dict(trace.stalls)
    if not stalls:  # the common case: a run that never stalled
        return HangInput(
            run=str(trace.path),
            world_size=trace.world_size,
            calls=recorded,
            stalls={},
            meta=dict(trace.meta),
            groups=group_members(trace.meta, trace.world_size),
            source=source,
        )
    known = stall_calls(stalls)
    # A recorded event is final; a stall record's view of the same call fills in the
    # calls still in flight when the trace was read, and says which ones were stuck.
    keys = ["rank", "group", "seq"]
    stuck = known.filter(pl.col("stalled")).select(keys).unique().with_columns(_s=pl.lit(True))
    recorded = (
        recorded.join(stuck, on=keys, how="left")
        .with_columns(pl.col("stalled") | pl.col("_s").fill_null(False))
        .drop("_s")
    )
    calls = pl.concat([recorded, known], how="vertical").unique(
        subset=keys, keep="first", maintain_order=True
    )
    return HangInput(
        run=str(trace.path),
        world_size=trace.world_size,
        calls=calls,
        stalls=stalls,
        meta=dict(trace.meta),
        groups=group_members(trace.meta, trace.world_size),
        source=source,
    )


def group_members(meta: dict[int, dict[str, Any]], world_size: int) -> dict[str, tuple[int, ...]]:
    """Process group -> its global ranks, from the metadata (``"0"`` is everyone)."""
    groups: dict[str, tuple[int, ...]] = {"0": tuple(range(world_size))}
    for m in meta.values():
        for name, spec in (m.get("groups") or {}).items():
            ranks = spec.get("ranks") if isinstance(spec, dict) else None
            if isinstance(ranks, list) and ranks and str(name) not in groups:
                groups[str(name)] = tuple(int(r) for r in ranks if isinstance(r, int))
    return groups


# Results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankAt:
    """A member of the group at the hang point and what it was doing."""

    rank: int
    host: str
    state: str  # waiting | completed | stuck | died | silent | exited | progressing | absent
    call: Call | None = None  # its call at the hang point, if it entered it
    last_call: Call | None = None  # otherwise: its last call in the group
    where: str = ""  # innermost relevant frame, "function (file:line)"
    stack: tuple[Frame, ...] = ()  # main thread's stack, outermost first
    stack_source: str = ""  # "stall record", "last call (Flight Recorder)", ...
    seen_ns: int = -1  # when its last stall record was written
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "state": self.state,
            "call": self.call.to_json() if self.call else None,
            "last_call": self.last_call.to_json() if self.last_call else None,
            "where": self.where,
            "stack": [str(f) for f in self.stack],
            "stack_code": [f.code for f in self.stack],
            "stack_source": self.stack_source,
            "seen_ns": self.seen_ns,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Mismatch:
    """Calls at one (group, seq) that disagree; ``sides`` maps a value to its ranks."""

    seq: int
    field: str  # op | bytes | dtype
    sides: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def minority(self) -> tuple[int, ...]:
        sizes = sorted(len(r) for _, r in self.sides)
        if len(sizes) > 1 and sizes[0] == sizes[1]:
            return ()  # no side is the odd one out
        return min((r for _, r in self.sides), key=len)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "field": self.field,
            "sides": [{"value": v, "ranks": list(r)} for v, r in self.sides],
        }


@dataclass(frozen=True)
class Skip:
    """Ranks whose calls of a group run ahead by iteration: they skipped (or added)
    calls in ``step``: ``counts`` is their number of calls there, ``expected`` the
    others'."""

    seq: int
    step: int
    ranks: tuple[int, ...]
    counts: dict[int, int]
    expected: int

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "step": self.step,
            "ranks": list(self.ranks),
            "counts": {str(k): v for k, v in self.counts.items()},
            "expected": self.expected,
        }


@dataclass(frozen=True)
class HangPoint:
    """One process group's hang point and every member's place there."""

    group: str
    seq: int
    op: str
    bytes: int
    dtype: str
    members: tuple[int, ...]
    ranks: tuple[RankAt, ...]
    since_ns: int  # earliest entry into the call among the ranks that wait
    observed_until_ns: int  # latest moment the data covers
    stalled: bool  # some rank's watchdog or failure says it is stuck or failed here
    mismatch: Mismatch | None = None
    skip: Skip | None = None

    def of(self, *states: str) -> tuple[RankAt, ...]:
        return tuple(r for r in self.ranks if r.state in states)

    @property
    def waiting(self) -> tuple[RankAt, ...]:
        return self.of("waiting")

    @property
    def missing(self) -> tuple[RankAt, ...]:
        """Members the others wait for: they never entered the call, or left no trace."""
        return self.of("stuck", "died", "silent", "exited", "progressing", "absent")

    @property
    def waited_ns(self) -> int:
        return max(0, self.observed_until_ns - self.since_ns) if self.since_ns >= 0 else 0

    @property
    def failed(self) -> tuple[RankAt, ...]:
        return tuple(r for r in self.waiting if r.call is not None and r.call.status in FAILED)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "bytes": self.bytes,
            "dtype": self.dtype,
            "members": list(self.members),
            "ranks": [r.to_json() for r in self.ranks],
            "since_ns": self.since_ns,
            "observed_until_ns": self.observed_until_ns,
            "waited_s": round(self.waited_ns / 1e9, 3),
            "stalled": self.stalled,
            "mismatch": self.mismatch.to_json() if self.mismatch else None,
            "skip": self.skip.to_json() if self.skip else None,
        }


@dataclass(frozen=True)
class HangAnalysis:
    """Every group's hang point, the root one first; mismatches outside any hang."""

    points: tuple[HangPoint, ...]
    mismatches: tuple[tuple[str, Mismatch], ...] = ()
    world_size: int = 0
    run: str = ""
    source: str = "trace"
    stall_records: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def root(self) -> HangPoint | None:
        return self.points[0] if self.points else None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "source": self.source,
            "world_size": self.world_size,
            "stall_records": self.stall_records,
            "points": [p.to_json() for p in self.points],
            "mismatches": [{"group": g, **m.to_json()} for g, m in self.mismatches],
            "notes": list(self.notes),
        }


# Measurement ---------------------------------------------------------------------------


def where_of(frames: tuple[Frame, ...]) -> str:
    """The innermost frame that is not the tracer's or Python's threading machinery,
    and, when that is library code, the innermost frame of the job's own code."""
    inner = next((fr for fr in reversed(frames) if not _NOT_WHERE.search(fr.file)), None)
    if inner is None:
        return str(frames[-1]) if frames else ""
    user = user_frame(frames)
    if user is None or user is inner:
        return str(inner)
    return f"{inner}, called from {user}"


def trim(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """``frames`` without the tracer's own innermost frames (they only show that the
    call is being recorded)."""
    end = len(frames)
    while end > 1 and _NOT_WHERE.search(frames[end - 1].file):
        end -= 1
    return frames[:end]


def user_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame outside installed packages and the standard library."""
    for fr in reversed(frames):
        if not _LIBRARY.search(fr.file) and not _NOT_WHERE.search(fr.file):
            return fr
    return None


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
