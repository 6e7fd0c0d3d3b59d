"""Link counters: each direction's shaper statistics, sampled into the run directory.

Every direction of every link has exactly one tbf (on the egress of the sending
end), so its ``tc -s`` statistics are that direction's traffic: bytes and packets
sent, packets dropped because the queue was full, and the current backlog. The
sampler appends one row per direction per sample to ``fabric-links.arrow`` (an
Arrow IPC stream, one batch per sample, so a killed run leaves a readable file).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from syncpace.fabric.backend import Backend
from syncpace.fabric.plan import stats_command
from syncpace.fabric.topology import Fabric
from syncpace.trace.schema import LINKS_FILE


@dataclass(frozen=True, slots=True)
class DirectionSample:
    time_ns: int  # wall clock (time.time_ns) of the sample
    link: str
    src: str  # the direction: traffic from src to dst
    dst: str
    kind: str  # "host" or "uplink"
    rate_bps: int  # the shaper's rate now (faults may change it)
    bytes: int  # cumulative since the fabric came up
    packets: int
    drops: int
    overlimits: int
    backlog_bytes: int


def sample(fabric: Fabric, backend: Backend) -> list[DirectionSample]:
    """One reading of every direction (one ``tc`` call per namespace)."""
    stats: dict[tuple[str, str], dict] = {}
    for namespace in fabric.namespaces:
        out = backend.run(stats_command(namespace).argv, check=False).stdout
        for qdisc in json.loads(out or "[]"):
            if qdisc.get("kind") == "tbf" and qdisc.get("root"):
                stats[(namespace, qdisc["dev"])] = qdisc
    now = time.time_ns()
    rows = []
    for link in fabric.links:
        for end, peer in ((link.a, link.b), (link.b, link.a)):
            q = stats.get((end.namespace, end.dev), {})
            rate = q.get("options", {}).get("rate")
            rows.append(
                DirectionSample(
                    time_ns=now,
                    link=link.name,
                    src=end.node,
                    dst=peer.node,
                    kind=link.kind,
                    rate_bps=int(rate) * 8 if rate is not None else -1,
                    bytes=int(q.get("bytes", -1)),
                    packets=int(q.get("packets", -1)),
                    drops=int(q.get("drops", -1)),
                    overlimits=int(q.get("overlimits", -1)),
                    backlog_bytes=int(q.get("backlog", -1)),
                )
            )
    return rows


def arrow_schema():  # -> pa.Schema; pyarrow is imported only where counters are written
    import pyarrow as pa

    types = {int: pa.int64(), str: pa.string()}
    return pa.schema(
        [
            (f.name, types[int] if f.type in (int, "int") else types[str])
            for f in fields(DirectionSample)
        ]
    )


class Sampler:
    """Samples every ``interval_s`` in a thread; ``stop()`` takes a last sample and closes."""

    def __init__(self, fabric: Fabric, backend: Backend, run_dir: Path, interval_s: float) -> None:
        import pyarrow as pa

        self.fabric = fabric
        self.backend = backend
        self.interval_s = interval_s
        self.path = run_dir / LINKS_FILE
        self.schema = arrow_schema()
        self._sink = pa.OSFile(str(self.path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="syncpace-counters", daemon=True)
        self.samples = 0
        self.error: str | None = None

    def start(self) -> None:
        self._write()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._write()

    def _write(self) -> None:
        import pyarrow as pa

        try:
            rows = sample(self.fabric, self.backend)
        except Exception as exc:  # counters are evidence, never a reason to stop a run
            self.error = str(exc)
            return
        columns = list(zip(*(astuple(r) for r in rows), strict=True))
        batch = pa.RecordBatch.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(columns, self.schema, strict=True)],
            schema=self.schema,
        )
        self._writer.write_batch(batch)
        self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._write()
        self._writer.close()
        self._sink.close()
