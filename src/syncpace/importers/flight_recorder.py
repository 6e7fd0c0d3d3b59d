"""PyTorch Flight Recorder dumps as input: the same hang finding from a job that only has
those.

Flight Recorder (``torch/csrc/distributed/c10d/FlightRecorder.cpp``) keeps a ring
buffer of every rank's last ``TORCH_FR_BUFFER_SIZE`` (``TORCH_NCCL_TRACE_BUFFER_SIZE``
before it) collectives. NCCL writes it on a timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``) to
``${TORCH_FR_DUMP_TEMP_FILE}<rank>`` (default ``/tmp/nccl_trace_rank_<rank>``); any
backend, gloo included, dumps it on demand through
``torch._C._distributed_c10d._dump_fr_trace()``. One file per rank, its rank the
digits that end the file name (as torch's own ``fr_trace`` analyzer reads them).

Implemented against the format torch 2.13 writes (``"version": "2.10"``): a pickled
dict of ``version``, ``pg_config`` (group name -> ``desc`` and the group's global
``ranks`` as a string), ``pg_status`` and ``entries``, each entry with
``process_group`` (name, desc), ``collective_seq_id`` (from 1), ``p2p_seq_id``,
``profiling_name`` (``"nccl:all_reduce"``, ``"gloo:broadcast"``, ``"nccl:send 0->1"``),
``input_sizes``/``output_sizes``, ``input_dtypes``/``output_dtypes``,
``time_created_ns`` (the rank's wall clock), ``state``, ``retired``,
``time_discovered_completed_ns`` and ``frames`` (the Python stack that issued it,
innermost first). The JSON form (``_dump_fr_trace_json``) is read too. Pickles are
read with an unpickler that refuses every class: a dump holds only plain containers,
so a crafted file cannot run code.

An entry becomes one trace event (``seq`` = ``collective_seq_id - 1``, the trace's
numbering from 0); each rank's dump becomes a stall record (calls not retired are in
flight; the stack of each call is kept), so :mod:`syncpace.analysis.hang` reads it like
a traced run. What FR cannot say is said: it holds no current stack of a rank (only
the stack of its calls), gloo marks a call that failed as retired, and its clocks are
not aligned across ranks.
"""

from __future__ import annotations

import ast
import io
import json
import os
import pickle
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from syncpace.errors import TraceError
from syncpace.importers.contract import INPUT_COLUMNS, Conversion, RankFrame, Request
from syncpace.trace import schema
from syncpace.trace.columns import EVENT_COLUMNS
from syncpace.trace.merge import join_parts, merge_traces
from syncpace.trace.reader import Trace, load_trace
from syncpace.trace.stall import Call, Frame, StallRecord
from syncpace.trace.validate.files import read_regular

#: The format version this importer was written against (torch 2.13).
KNOWN_VERSION = "2.10"
#: Sanity bound on one dump (a 2,000-entry buffer with stacks is a few MB).
MAX_DUMP_BYTES = 512 << 20

_RANK_RE = re.compile(r"(\d+)$")

#: Flight Recorder op names -> the trace's canonical ops.
_OPS = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "all_reduce_barrier": "barrier",
    "barrier": "barrier",
    "broadcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "reduce": "reduce",
    "_reduce_oop": "reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "_all_gather_base": "all_gather",
    "_allgather_base": "all_gather",
    "all_gather_single": "all_gather",
    "all_gather_v": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "ALLGATHER_coalesced": "all_gather",
    "allgather_coalesced": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_v": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "REDUCE_SCATTER_coalesced": "reduce_scatter",
    "gather": "gather",
    "scatter": "scatter",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "all_to_all_v_single": "all_to_all",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "send": "send",
    "recv": "recv",
}
#: FR dtype names (c10 ScalarType) -> the trace's names and element sizes.
_DTYPES = {
    "Float": ("float32", 4),
    "Double": ("float64", 8),
    "Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8),
    "Int": ("int32", 4),
    "Short": ("int16", 2),
    "Char": ("int8", 1),
    "Byte": ("uint8", 1),
    "Bool": ("bool", 1),
    "ComplexFloat": ("complex64", 8),
    "ComplexDouble": ("complex128", 16),
    "Float8_e4m3fn": ("float8_e4m3fn", 1),
    "Float8_e5m2": ("float8_e5m2", 1),
}
#: Ops whose nccl-tests message size is the output (gathered) total.
_BY_OUTPUT = ("all_gather", "gather")


class _PlainUnpickler(pickle.Unpickler):
    """Builds only the containers pickle encodes natively; refuses every class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not a plain FR dump")


@dataclass(frozen=True)
class RankDump:
    """One rank's Flight Recorder dump, as read."""

    path: Path
    rank: int
    version: str
    entries: tuple[dict[str, Any], ...]
    pg_config: dict[str, Any]
    pg_status: dict[str, Any]
    written_ns: int = -1  # the file's modification time: when the dump was taken


def _decode(path: Path, data: bytes) -> dict[str, Any]:
    if data[:1] == b"{":
        try:
            obj = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(path, f"not a Flight Recorder JSON dump ({exc})") from exc
    else:
        try:
            obj = _PlainUnpickler(io.BytesIO(data)).load()
        except Exception as exc:  # every unpickling failure says the same: not a dump
            raise TraceError(path, f"not a Flight Recorder dump ({exc})") from exc
    if not isinstance(obj, dict) or "entries" not in obj or "version" not in obj:
        raise TraceError(path, "not a Flight Recorder dump (no 'entries' and 'version')")
    return obj


def read_dump(path: str | os.PathLike[str], rank: int | None = None) -> RankDump:
    """One dump file; its rank from the digits its name ends with unless given."""
    p = Path(path)
    if rank is None:
        m = _RANK_RE.search(p.name)
        if not m:
            raise TraceError(p, "no rank in the file name (Flight Recorder dumps end in it)")
        rank = int(m.group(1))
    # a regular file within the bound (a device's size is 0: /dev/zero was read on)
    obj = _decode(p, read_regular(p, MAX_DUMP_BYTES, "Flight Recorder dump"))
    try:
        mtime_ns = p.stat().st_mtime_ns
    except OSError as exc:  # removed since it was read
        raise TraceError(p, f"cannot read: {exc.strerror or exc}") from exc
    version = str(obj.get("version"))
    if not version.startswith("2."):
        raise TraceError(p, f"Flight Recorder format version {version!r} is not supported (2.x is)")
    entries = obj.get("entries") or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise TraceError(p, "'entries' is not a list of records")
    for e in entries:
        for key in ("process_group", "collective_seq_id", "profiling_name"):
            if key not in e:
                raise TraceError(p, f"an entry lacks {key!r} (format older than 2.2?)")
    return RankDump(
        p,
        rank,
        version,
        tuple(entries),
        obj.get("pg_config") or {},
        obj.get("pg_status") or {},
        mtime_ns,
    )


def _looks_like_dump(path: Path) -> bool:
    if not path.is_file() or path.name.startswith(".") or not _RANK_RE.search(path.name):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(2)
    except OSError:
        return False
    return head[:1] == b"\x80" or head[:1] == b"{"


def dump_files(path: str | os.PathLike[str]) -> list[Path]:
    """The Flight Recorder dumps ``path`` holds (itself, if it is one)."""
    p = Path(path)
    if p.is_file():
        return [p] if _looks_like_dump(p) else []
    if not p.is_dir():
        return []
    return sorted(f for f in p.iterdir() if _looks_like_dump(f))


def is_dump_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` holds Flight Recorder dumps and no syncpace trace."""
    p = Path(path)
    if p.is_dir() and any(p.glob(f"rank-*{schema.META_SUFFIX}")):
        return False
    return bool(dump_files(p))


def find_dumps(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The dump files under ``paths`` (files or directories); a path with none is refused."""
    found: list[Path] = []
    for path in paths:
        files = dump_files(path)
        if not files:
            raise TraceError(path, "no Flight Recorder dumps here (files named …<rank>)")
        found.extend(files)
    return found


def read_dumps(files: Iterable[Path]) -> list[RankDump]:
    """Each dump file read, one per rank, in rank order."""
    dumps: dict[int, RankDump] = {}
    for f in files:
        dump = read_dump(f)
        if dump.rank in dumps:
            raise TraceError(f, f"a second dump of rank {dump.rank} ({dumps[dump.rank].path})")
        dumps[dump.rank] = dump
    return [dumps[r] for r in sorted(dumps)]


def load_dumps(paths: Iterable[str | os.PathLike[str]]) -> list[RankDump]:
    """Every dump under ``paths`` (files or directories), one per rank."""
    return read_dumps(find_dumps(paths))


# Conversion ----------------------------------------------------------------------------


def _ranks(spec: Any) -> list[int]:
    raw = spec.get("ranks") if isinstance(spec, dict) else None
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
    return [int(r) for r in raw] if isinstance(raw, (list, tuple)) else []


def _op(profiling_name: str) -> tuple[str, str]:
    """``"nccl:send 0->1"`` -> (canonical op, the rest of the name)."""
    name = profiling_name.split(":", 1)[-1]
    base, _, rest = name.partition(" ")
    return _OPS.get(base, base), rest


def _numel(sizes: Any) -> int:
    total = 0
    for shape in sizes or ():
        n = 1
        for d in shape:
            n *= int(d)
        total += n
    return total


def _payload(entry: dict[str, Any], op: str) -> tuple[int, str]:
    dtypes = entry.get("input_dtypes") or entry.get("output_dtypes") or []
    name, size = _DTYPES.get(str(dtypes[0]), (str(dtypes[0]).lower(), 0)) if dtypes else ("", 0)
    sizes = entry.get("output_sizes") if op in _BY_OUTPUT else entry.get("input_sizes")
    return _numel(sizes) * size, name


def _frames(entry: dict[str, Any]) -> tuple[Frame, ...]:
    frames = []
    for f in reversed(entry.get("frames") or []):  # FR lists the innermost first
        if isinstance(f, dict):
            frames.append(
                Frame(str(f.get("filename", "")), int(f.get("line") or 0), str(f.get("name", "")))
            )
    return tuple(frames)


def _peer(op: str, rest: str, ranks: list[int]) -> int:
    m = re.match(r"(\d+)\s*(->|<-)\s*(\d+)", rest)
    if op not in ("send", "recv") or not m:
        return schema.NO_PEER
    local = int(m.group(3))  # send a->b: b is the peer; recv a<-b: b is the peer
    return ranks[local] if 0 <= local < len(ranks) else local


def _call(entry: dict[str, Any], ranks_of: dict[str, list[int]]) -> Call | None:
    op, rest = _op(str(entry["profiling_name"]))
    if op not in schema.OPS:  # "coalesced" markers and ops the trace has no name for
        return None
    group = str((entry.get("process_group") or ("",))[0])
    p2p = op in ("send", "recv")
    seq = int(entry.get("p2p_seq_id" if p2p else "collective_seq_id") or 0) - 1
    nbytes, dtype = _payload(entry, op)
    done = bool(entry.get("retired")) or entry.get("state") == "completed"
    completed_ns = entry.get("time_discovered_completed_ns") or -1
    return Call(
        group=group,
        seq=seq,
        op=op,
        bytes=nbytes,
        dtype=dtype,
        peer=_peer(op, rest, ranks_of.get(group, [])),
        enter_ns=int(entry.get("time_created_ns") or -1),
        exit_ns=int(completed_ns) if done and int(completed_ns) > 0 else -1,
        status="completed" if done else "in_flight",
        frames=_frames(entry),
    )


def _groups(dumps: Sequence[RankDump]) -> dict[str, list[int]]:
    """Group name -> global ranks, from ``pg_config`` where it is usable (gloo's names
    no group there: then the ranks whose dumps use the group)."""
    groups: dict[str, list[int]] = {}
    for d in dumps:
        for name, spec in d.pg_config.items():
            ranks = _ranks(spec)
            if name and ranks:
                groups.setdefault(str(name), ranks)
    return groups


def world_size_of(dumps: Sequence[RankDump], groups: dict[str, list[int]]) -> int:
    """The job's world size: the default group's size, else the largest group, else the
    highest rank dumped + 1."""
    if "0" in groups:
        return len(groups["0"])
    sizes = [len(_ranks(s)) for d in dumps for s in d.pg_config.values()]
    return max([*sizes, max(d.rank for d in dumps) + 1])


def _record(dump: RankDump, calls: list[Call], world: int) -> StallRecord:
    open_calls = sorted((c for c in calls if not c.done), key=lambda c: c.enter_ns)
    last: dict[str, Call] = {}
    for c in calls:
        if c.done and (c.group not in last or c.seq > last[c.group].seq):
            last[c.group] = c
    times = [t for c in calls for t in (c.enter_ns, c.exit_ns) if t > 0]
    latest = max([*times, dump.written_ns], default=-1)
    return StallRecord(
        rank=dump.rank,
        world_size=world,
        state="stalled",
        kind="in_collective" if open_calls else "no_progress",
        since_ns=open_calls[0].enter_ns if open_calls else latest,
        written_ns=latest,
        in_flight=tuple(open_calls),
        in_flight_total=len(open_calls),
        last_completed=last,
        source="flight_recorder",
    )


def to_trace(
    dumps: Sequence[RankDump], world_size: int | None = None, path: str | Path = ""
) -> Trace:
    """The dumps as a trace: one event per entry, one stall record per rank."""
    if not dumps:
        raise TraceError(Path(path or "."), "no Flight Recorder dumps to read")
    groups = _groups(dumps)
    world = world_size or world_size_of(dumps, groups)
    groups.setdefault("0", list(range(world)))
    bad = [d.rank for d in dumps if d.rank >= world]
    if bad:
        raise TraceError(dumps[0].path, f"ranks {bad} do not fit world size {world}")
    rows, meta, stalls = [], {}, {}
    used: dict[str, set[int]] = {}
    for d in dumps:
        calls = [c for c in (_call(e, groups) for e in d.entries) if c is not None]
        for c in calls:
            used.setdefault(c.group, set()).add(d.rank)
            rows.append(_event(d.rank, c, world, groups))
        stalls[d.rank] = _record(d, calls, world)
    for name, ranks in used.items():
        groups.setdefault(name, sorted(ranks))
    for d in dumps:
        meta[d.rank] = {
            "schema": schema.SCHEMA_NAME,
            "schema_version": schema.SCHEMA_VERSION,
            "rank": d.rank,
            "world_size": world,
            "host": "",
            "source": "flight_recorder",
            "finished": False,
            "groups": {g: {"ranks": r} for g, r in groups.items()},
            "flight_recorder": {
                "path": str(d.path),
                "version": d.version,
                "entries": len(d.entries),
                "pg_status": d.pg_status,
            },
        }
    events = pl.from_arrow(schema.events_table(_columns(rows)))
    steps = pl.DataFrame(schema=_polars(schema.STEPS))
    warnings = []
    if any(d.version != KNOWN_VERSION for d in dumps):
        versions = sorted({d.version for d in dumps})
        warnings.append(f"Flight Recorder format {versions}; read as {KNOWN_VERSION}")
    missing = sorted(set(range(world)) - set(meta))
    if missing:
        warnings.append(f"{len(missing)} of {world} ranks have no Flight Recorder dump: {missing}")
    where = Path(path) if path else dumps[0].path.parent
    return Trace(
        path=where,
        world_size=world,
        meta=meta,
        events=events,
        steps=steps,
        warnings=tuple(warnings),
        stalls=stalls,
    )


def _event(rank: int, c: Call, world: int, groups: dict[str, list[int]]) -> dict[str, Any]:
    """One call as the trace's columns; a dump has no device time of its own (its
    ``duration_ms`` is not placed on any clock), so those columns read as not observed."""
    return {
        "rank": rank,
        "step": -1,
        "group": c.group,
        "group_size": len(groups.get(c.group, [])) or world,
        "seq": c.seq,
        "op": c.op,
        "bytes": c.bytes,
        "dtype": c.dtype,
        "peer": c.peer,
        "enter_ns": c.enter_ns,
        "exit_ns": c.exit_ns,
        "timing": "wait",
        "status": "completed" if c.done else "pending",
        "error": None,
        "wait_ns": -1,
    }


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    names = [c.name for c in EVENT_COLUMNS if not c.name.startswith("device_")]
    return {name: [row[name] for row in rows] for name in names}


def _polars(arrow_schema: Any) -> dict[str, Any]:
    return dict(pl.from_arrow(arrow_schema.empty_table()).schema)  # type: ignore[union-attr]


def load_flight_recorder(
    paths: Iterable[str | os.PathLike[str]], world_size: int | None = None
) -> Trace:
    """Flight Recorder dumps (files or directories) as one trace."""
    paths = list(paths)
    return to_trace(load_dumps(paths), world_size, " + ".join(str(p) for p in paths))


def load_run(paths: Sequence[str | os.PathLike[str]], world_size: int | None = None) -> Trace:
    """One job from syncpace run directories and Flight Recorder dump directories: the
    dumps are read together, the directories joined as parts of one job."""
    dumps = [p for p in paths if is_dump_dir(p)]
    traces = [load_trace(p) for p in paths if p not in dumps]
    if dumps:
        traces.append(load_flight_recorder(dumps, world_size))
    joined = join_parts(traces)
    return joined[0] if len(joined) == 1 else merge_traces(joined)


# As a run directory (syncpace import flight-recorder) ---------------------------------

#: What a Flight Recorder dump cannot tell, said in the converted trace's metadata.
CANNOT_TELL = [
    "iterations (Flight Recorder records none: the whole dump is one step)",
    "completion times (the watchdog's discovery of them, not the backend's)",
    "each rank's current stack (only the stacks that issued its calls)",
    "failed gloo calls (gloo marks them retired)",
]


class FlightRecorderConverter:
    """Flight Recorder dumps (files or directories) as a syncpace run directory: the events
    every command reads, and each rank's stall record (``rank-R.stall.json``) for ``hang``.
    Its option ``world_size`` sets the job's size where the dumps cannot tell it."""

    options: tuple[str, ...] = ("world_size",)

    def find(self, srcs: Sequence[Path]) -> list[Path]:
        return find_dumps(srcs)

    def read(self, request: Request) -> Conversion:
        dumps = read_dumps(request.files)
        trace = to_trace(dumps, request.options.get("world_size"))
        ranks = []
        for d in dumps:
            own = trace.events.filter(pl.col("rank") == d.rank)
            events = own.with_columns(call_ns=pl.col("enter_ns")).select(
                [pl.col(c).cast(t) for c, t in INPUT_COLUMNS.items()]
            )
            meta = trace.meta[d.rank]
            ranks.append(
                RankFrame(
                    rank=d.rank,
                    events=events,
                    groups=meta["groups"],
                    files=[str(d.path)],
                    notes={"flight_recorder": meta["flight_recorder"]},
                    stall=trace.stalls[d.rank],
                )
            )
            request.on_bytes(d.path.stat().st_size)
        return Conversion(
            ranks=ranks,
            world_size=trace.world_size,
            source="flight_recorder",
            missing=CANNOT_TELL,
            warnings=trace.warnings,
        )


CONVERTER = FlightRecorderConverter()
