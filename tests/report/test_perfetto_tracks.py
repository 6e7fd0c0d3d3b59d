"""The Perfetto export's counter tracks and cross-rank flows, read back from the
exported JSON: every counter event's value is the counters file's own, and every
collective instance is one flow through all its ranks, from the first to arrive to the
last (tests/known_run.py plants who arrives when)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

import known_run as k
from syncpace.cli.main import main
from syncpace.fabric.counters import arrow_schema
from syncpace.report.perfetto import export_perfetto
from syncpace.trace import schema
from syncpace.trace.hostwriter import CountersWriter, host_paths, write_host_meta
from syncpace.trace.reader import load_trace

MS = k.MS
#: (source, device, port, counter) -> [(time_ns, value)], written to the host's file
HOST_SERIES = {
    ("nic", "eth0", -1, "tx_bytes"): [(k.T0 + 1 * MS, 1000), (k.T0 + 11 * MS, 51_000)],
    ("nic", "eth0", -1, "rx_drop"): [(k.T0 + 1 * MS, 0), (k.T0 + 31 * MS, 7)],
    ("ib", "mlx5_0", 1, "port_xmit_data"): [(k.T0 + 2 * MS, 2**40 + 3)],
    ("cpu", "", -1, "user_ns"): [(k.T0 + 1 * MS, 123)],  # not a network series
}
#: rows of the fabric's link counters: two directions of one uplink, three samples
LINKS = [
    {"time_ns": k.T0 + t * MS, "link": "up0", "src": a, "dst": b, "kind": "uplink",
     "rate_bps": 100_000_000, "bytes": n, "packets": n // 1000, "drops": d,
     "overlimits": 0, "backlog_bytes": -1}
    for t, n, d in ((0, 0, 0), (40, 400_000, 2), (80, 900_000, 5))
    for a, b in (("leaf0", "spine"), ("spine", "leaf0"))
]  # fmt: skip


def _write_counters(run: Path) -> None:
    meta, counters = host_paths(run, k.HOST)
    write_host_meta(meta, {"host": k.HOST})
    series = list(HOST_SERIES)
    rows = sorted((t, i, v) for i, s in enumerate(series) for t, v in HOST_SERIES[s])
    writer = CountersWriter(counters, k.HOST)
    writer.write([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], series)
    writer.close()
    table = pa.Table.from_pylist(LINKS, schema=arrow_schema())
    with pa.OSFile(str(run / schema.LINKS_FILE), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as out:
            out.write_table(table)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run = k.write(tmp_path_factory.mktemp("known") / "run")
    _write_counters(run)
    return run


def _streamed(run: Path, tmp: Path) -> list[dict]:
    out = tmp / "streamed.json"
    assert main(["export", "--perfetto", str(run), "-o", str(out)]) == 0
    return json.loads(out.read_text())["traceEvents"]


def _loaded(run: Path, tmp: Path) -> list[dict]:
    out = export_perfetto(load_trace(run), tmp / "loaded.json").path
    return json.loads(out.read_text())["traceEvents"]


@pytest.fixture(scope="module", params=["streamed", "loaded"])
def events(request, run, tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp(request.param)
    return (_streamed if request.param == "streamed" else _loaded)(run, tmp)


def _ts(time_ns: int) -> float:
    return (time_ns - k.T0) / 1e3  # the export's origin: the first step's start


def _processes(events: list[dict]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}


def test_every_network_counter_of_the_host_file_is_a_track_with_its_values(events):
    names = _processes(events)
    (pid,) = [p for p, n in names.items() if n == f"host {k.HOST}: network counters"]
    seen = defaultdict(list)
    for e in events:
        if e["ph"] == "C" and e["pid"] == pid:
            ((counter, value),) = e["args"].items()
            seen[(e["name"], counter)].append((e["ts"], value))
    expected = {
        (device, counter): [(_ts(t), v) for t, v in points]
        for (source, device, _, counter), points in HOST_SERIES.items()
        if source != "cpu"
    }
    assert {key: sorted(v) for key, v in seen.items()} == expected


def test_every_link_direction_is_a_track_with_the_files_values(events):
    names = _processes(events)
    (pid,) = [p for p, n in names.items() if n == "fabric links"]
    counters = [e for e in events if e["ph"] == "C" and e["pid"] == pid]
    assert len(counters) == len(LINKS)
    got = {(e["name"], e["ts"]): e["args"] for e in counters}
    for row in LINKS:
        args = got[(f"up0 {row['src']}→{row['dst']}", _ts(row["time_ns"]))]
        known = {c: row[c] for c in ("bytes", "packets", "drops", "overlimits", "rate_bps")}
        assert args == known  # backlog_bytes is -1 (unknown): left out


def test_one_flow_per_collective_through_all_its_ranks_first_to_last_arrival(events):
    begins = [e for e in events if e["ph"] == "b"]
    flows = defaultdict(list)
    for position, e in enumerate(begins):
        flows[e["bind_id"]].append((e["ts"], position, e))
    assert len(flows) == 2 * k.STEPS  # a broadcast and an all-reduce per step
    for chain in flows.values():
        chain = [e for _, _, e in sorted(chain, key=lambda c: c[:2])]
        assert sorted(e["pid"] for e in chain) == list(range(k.WORLD))
        assert len({(e["args"]["group"], e["args"]["seq"]) for e in chain}) == 1
        directions = [(e["flow_out"], e["flow_in"]) for e in chain]
        assert directions == [(True, False)] + [(True, True)] * (k.WORLD - 2) + [(False, True)]
        if chain[0]["name"].startswith("all_reduce"):
            # rank 0 computes least and arrives first; rank 2 last, the one waited for
            assert [e["pid"] for e in chain] == [0, 1, 2]


def test_a_damaged_links_file_is_a_warning_naming_it(run, tmp_path, capsys):
    damaged = tmp_path / "run"
    damaged.mkdir()
    for f in run.iterdir():
        (damaged / f.name).write_bytes(f.read_bytes())
    (damaged / schema.LINKS_FILE).write_bytes(b"not arrow at all")
    out = tmp_path / "t.json"
    assert main(["export", "--perfetto", str(damaged), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert f"{damaged / schema.LINKS_FILE}: not a readable link counters file" in said
    names = _processes(json.loads(out.read_text())["traceEvents"])
    assert "fabric links" not in names.values()
    assert f"host {k.HOST}: network counters" in names.values()
