"""Metadata, decoded strictly: RFC 8259 JSON (no ``NaN``, no invalid UTF-8 or lone
surrogates), then converted to typed, versioned structs (:class:`RankMeta`,
:class:`HostMeta`). Wrong types, values out of range and unknown versions are a
:class:`~syncpace.errors.TraceError`: one line naming the file, the key and the
problem. Keys this version does not know are kept and ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.validate.files import MAX_META_BYTES, read_regular

#: Sanity bound: larger values are damage, not clusters.
MAX_WORLD_SIZE = 1 << 20

_I64 = 2**63 - 1
NonNeg = Annotated[int, msgspec.Meta(ge=0, le=_I64)]
Int64 = Annotated[int, msgspec.Meta(ge=-_I64 - 1, le=_I64)]
Text = Annotated[str, msgspec.Meta(max_length=4096)]


class ClockSample(msgspec.Struct):
    local_ns: Int64
    offset_ns: Int64
    uncertainty_ns: NonNeg
    rtt_ns: NonNeg


class Clock(msgspec.Struct):
    offset_ns: Int64 | None = None
    uncertainty_ns: NonNeg | None = None
    samples: list[ClockSample] = []
    error: str | None = None


class Group(msgspec.Struct):
    ranks: list[NonNeg]
    backend: str | None = None
    desc: Text | None = None  # torch's group description: "default_pg", "mesh_tp"
    mesh_dims: list[Text] = []  # the DeviceMesh dimensions the group serves


class JournalSizes(msgspec.Struct):
    slots: NonNeg
    inflight_slots: NonNeg


class Pacing(msgspec.Struct):
    """The keys of the pacer's account that the summary reads."""

    policy: str | None = None
    delay_max_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    policy_config: dict[str, Any] | None = None
    controller_config: dict[str, Any] | None = None
    ab: dict[str, Any] | None = None
    ab_state: str | None = None
    enabled: bool | None = None
    error: str | None = None


class Segments(msgspec.Struct):
    """What rotation removed from a rank's events (always-on mode)."""

    segment_s: float
    keep_s: float
    budget_bytes: NonNeg
    written: NonNeg
    removed: NonNeg
    removed_events: NonNeg
    removed_bytes: NonNeg
    removed_steps: list[tuple[Int64, Int64]] = []
    pins: list[dict[str, Any]] = []


class DeviceClock(msgspec.Struct):
    """What the tracer says of a rank's device clock: the time base reads ``source`` and
    ``uncertainty_ns`` (``null`` until a call's device times were resolved)."""

    source: Text | None = None
    uncertainty_ns: NonNeg | None = None
    anchors: NonNeg = 0
    failed_anchors: NonNeg = 0
    drift_ppm: float = 0.0
    resolved: NonNeg = 0
    unresolved: NonNeg = 0
    pending: NonNeg = 0


class RankMeta(msgspec.Struct):
    """``rank-R.meta.json``, versions 1 and 2 (they share the metadata)."""

    schema: str
    schema_version: int
    rank: Annotated[int, msgspec.Meta(ge=0, lt=MAX_WORLD_SIZE)]
    world_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_WORLD_SIZE)]
    host: Text
    finished: bool = False
    events_written: NonNeg | None = None
    steps_written: NonNeg | None = None
    dropped_events: NonNeg = 0
    write_error: str | None = None
    local_rank: NonNeg | None = None
    node_rank: NonNeg | None = None
    local_world_size: NonNeg | None = None
    pid: Int64 | None = None
    device: Text | None = None
    backend: Text | None = None
    source: Text = "unknown"
    tool_version: Text | None = None
    started_ns: Int64 | None = None
    clock: Clock | None = None
    groups: dict[str, Group] | None = None
    topology: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    pacing: Pacing | None = None
    job_id: Text | None = None  # the same on every rank of one job (trace/merge.py)
    job_id_source: Text | None = None
    launcher: dict[str, Text] | None = None
    journal: JournalSizes | None = None
    journal_overflow: NonNeg = 0
    closed_by: Text | None = None
    segments: Segments | None = None
    summaries_written: NonNeg | None = None
    device_clock: DeviceClock | None = None


_DECODER = msgspec.json.Decoder()


def read_meta(path: Path) -> dict[str, Any]:
    """The validated metadata of one rank, as the plain dict it was written as."""
    data = read_regular(path, MAX_META_BYTES, "metadata file")
    if not data.strip():
        raise TraceError(path, "empty metadata file")
    try:
        meta = _DECODER.decode(data)
    except msgspec.ValidationError as exc:  # a number no 64-bit type holds
        raise TraceError(path, f"not usable JSON ({_msgspec_reason(exc)})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"not valid JSON ({_msgspec_reason(exc)})") from exc
    except RecursionError as exc:
        raise TraceError(path, "not usable JSON (nested too deeply)") from exc
    if not isinstance(meta, dict):
        raise TraceError(path, "metadata is not a JSON object")
    if meta.get("schema") != schema.SCHEMA_NAME:
        raise TraceError(path, f"not a syncpace trace (schema is {_short(meta.get('schema'))})")
    version = meta.get("schema_version")
    if version not in schema.READABLE_VERSIONS or isinstance(version, bool):
        readable = ", ".join(str(v) for v in schema.READABLE_VERSIONS)
        raise TraceError(
            path,
            f"trace schema version {_short(version)} is not supported "
            f"(this syncpace reads versions {readable})",
        )
    for key in schema.REQUIRED_META_KEYS:
        if key not in meta:
            raise TraceError(path, f"metadata lacks the key {key!r}")
    try:
        typed = msgspec.convert(meta, RankMeta, strict=True)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"invalid metadata: {_msgspec_reason(exc)}") from exc
    if typed.rank >= typed.world_size:
        raise TraceError(path, f"rank {typed.rank} does not fit world size {typed.world_size}")
    return meta


class TopologyNic(msgspec.Struct):
    name: Text
    numa_node: Int64 | None = None
    pci: Text | None = None
    ib_devices: list[Text] = []
    netdevs: list[Text] = []


class TopologyGpu(msgspec.Struct):
    name: Text
    pci: Text
    numa_node: Int64 | None = None


class HostTopology(msgspec.Struct):
    gpus: list[TopologyGpu] = []
    nics: list[TopologyNic] = []
    matrix: dict[Text, dict[Text, Text]] = {}
    numa_nodes: dict[Text, Text] = {}


class HostMeta(msgspec.Struct):
    """``host-H.meta.json``: what the analysis reads of it, typed."""

    schema: str
    host: Text = ""
    topology: HostTopology | None = None
    nvml: dict[str, Any] | None = None


def read_host_meta(path: Path) -> dict[str, Any]:
    """A host's facts, validated like a rank's metadata (the same bounds and one-line
    errors): the plain dict it was written as."""
    data = read_regular(path, MAX_META_BYTES, "host file")
    try:
        meta = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not usable JSON ({_msgspec_reason(exc)})") from exc
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"not valid JSON ({_msgspec_reason(exc)})") from exc
    except RecursionError as exc:
        raise TraceError(path, "not usable JSON (nested too deeply)") from exc
    if not isinstance(meta, dict) or meta.get("schema") != schema.HOST_SCHEMA_NAME:
        raise TraceError(path, "not a syncpace host file")
    try:
        msgspec.convert(meta, HostMeta, strict=True)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"invalid host facts: {_msgspec_reason(exc)}") from exc
    return meta


def _msgspec_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def visible_reason(exc: Exception) -> str:
    """A decoder's complaint as one short printable line: it may quote the bad value."""
    text = _msgspec_reason(exc)[:200]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
