"""The importers' parts on their own: streaming JSON, clock offsets, gloo groups, inputs."""

from __future__ import annotations

import gzip
import json
import tracemalloc

import numpy as np
import polars as pl
import pytest

from syncpace.errors import ConfigError, TraceError
from syncpace.importers import (
    FORMATS,
    available,
    clocks,
    convert,
    dtypes,
    jsonstream,
    kineto_gloo,
    kineto_scan,
)
from syncpace.importers.config import ImportConfig
from syncpace.importers.contract import INPUT_COLUMNS, Conversion, RankFrame, Request
from syncpace.importers.tracebuild import assign_seq, write_trace
from syncpace.trace import load_trace

BASE = {"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 4}}


def chrome_trace(events: list[dict], **header) -> str:
    return json.dumps({**BASE, **header, "traceEvents": events, "traceName": "x"})


def event(name: str, ts: float, dur: float = 1.0, cat: str = "cpu_op", tid: int = 1, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 7,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_plain_and_gzip_streams_give_the_same_events(tmp_path):
    events = [event(f"aten::op{i}", i * 10.0) for i in range(100)]
    plain, packed = tmp_path / "a.json", tmp_path / "b.json.gz"
    plain.write_text(chrome_trace(events))
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert list(jsonstream.iter_items(plain, None)) == events
    assert list(jsonstream.iter_items(packed, None)) == events
    assert jsonstream.read_header(packed)["distributedInfo"] == BASE["distributedInfo"]
    # a bare list of events (Chrome's other trace form) too
    bare = tmp_path / "c.json"
    bare.write_text(json.dumps(events))
    assert list(jsonstream.iter_items(bare, None)) == events and jsonstream.read_header(bare) == {}


def test_a_trace_cut_short_keeps_what_was_complete(tmp_path):
    text = chrome_trace([event("aten::mm", float(i)) for i in range(50)])
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    warnings: list[str] = []
    got = list(jsonstream.iter_items(path, None, warnings=warnings))
    assert 10 < len(got) < 50
    (warning,) = warnings
    assert warning.startswith(f"{path}: cut short after {len(got)} records")
    (tmp_path / "junk.json").write_text("this is not JSON")
    with pytest.raises(TraceError, match=r"junk\.json: not valid JSON"):
        list(jsonstream.iter_items(tmp_path / "junk.json", None, warnings=[]))


def kineto_block(e: dict) -> str:
    """An event as Kineto's writer prints it: its own block, keys indented by four."""
    keys = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in e.items() if k != "args")
    return f'  {{\n    {keys},\n    "args": {{\n      {json.dumps(e["args"])[1:-1]}\n    }}\n  }}'


def _profile_file(path, events: int, layout: bool = True) -> int:
    """A Kineto-like file of compute ops with a collective every 250 events, in Kineto's
    layout or as compact JSON."""
    with open(path, "w") as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n')
        for i in range(events):
            args = {"Input Dims": [[16, 64], [64, 64]], "External id": i, "Ev Idx": i}
            e = event("aten::addmm", i * 5.0, 2.0, **args)
            if i % 250 == 0:
                e = event("c10d::allreduce_", i * 5.0, 2.0, **{"Input Dims": [[[64]]]})
            text = kineto_block(e) if layout else json.dumps(e)
            f.write((",\n" if i else "") + text)
        f.write('\n  ],\n  "traceName": "x"\n}\n')
    return path.stat().st_size


def test_kinetos_layout_and_any_other_give_the_same_scan(tmp_path):
    """The fast path (only wanted blocks parsed) and the full parse agree."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _profile_file(a, 2_000, layout=True), _profile_file(b, 2_000, layout=False)
    fast = list(jsonstream.iter_named_events(a, ("c10d::",)))
    assert [e["ts"] for e in fast] == [i * 5.0 for i in range(0, 2_000, 250)]
    with pytest.raises(jsonstream.NotThisLayout):
        list(jsonstream.iter_named_events(b, ("c10d::",)))
    sa, sb = kineto_scan.scan_file(a, None, []), kineto_scan.scan_file(b, None, [])
    assert sa.calls == sb.calls and len(sa.calls) == 8
    assert sb.other_events == 2_000 - 8 and sa.other_events == -1  # never parsed
    # cut short inside an event: what was complete is kept, and said
    text = a.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: int(len(text) * 0.6)])
    warnings: list[str] = []
    partial = kineto_scan.scan_file(cut, None, warnings)
    assert 0 < len(partial.calls) < 8
    assert warnings and "cut short" in warnings[0]


def _scan_peak(path) -> tuple[kineto_scan.RankScan, int]:
    tracemalloc.start()
    try:
        scan = kineto_scan.scan_file(path, None, [])
        return scan, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layout", [True, False], ids=["kineto-layout", "any-json"])
def test_scanning_memory_is_bounded_by_collectives_not_file_size(tmp_path, monkeypatch, layout):
    """A file four times larger needs no more memory to scan: the scan holds the
    collectives and a bounded window of the file (here 256 KiB chunks; 8 MiB in use),
    never the file. Both the fast path and the full streaming parse."""
    monkeypatch.setattr(jsonstream, "_CHUNK", 256 << 10)
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    small_size = _profile_file(small, 5_000, layout)
    large_size = _profile_file(large, 20_000, layout)
    assert large_size > 3.5 * small_size > 3e6
    small_scan, small_peak = _scan_peak(small)
    large_scan, large_peak = _scan_peak(large)
    assert len(small_scan.calls) == 20 and len(large_scan.calls) == 80
    assert large_scan.other_events == (-1 if layout else 20_000 - 80)
    assert large_peak < 1.25 * small_peak + 100_000, (small_peak, large_peak)
    assert large_peak < 4 << 20, large_peak  # read buffers, parser state, the collectives


def test_offsets_come_back_from_collective_ends():
    rng = np.random.default_rng(7)
    offsets = {0: 0, 1: 3_000_000, 2: -1_500_000, 3: 250_000}
    rows = []
    for i in range(400):
        end = 1_000_000_000 + i * 5_000_000
        for rank, off in offsets.items():
            jitter = rng.normal(0, 20_000)
            if rng.random() < 0.03:  # a late wake-up on one rank now and then
                jitter += 4_000_000
            rows.append((i, rank, int(end + off + jitter)))
    ev = pl.DataFrame(rows, schema=["instance", "rank", "exit_ns"], orient="row")
    est = clocks.estimate_offsets(ev)
    for rank, off in offsets.items():
        error = abs(est.offset_ns[rank] + off)
        assert error < 10_000, (rank, est.offset_ns[rank])
        assert error <= est.uncertainty_ns[rank]
        assert est.uncertainty_ns[rank] < 100_000  # the outliers do not widen it
    assert est.instances[1] == 400


def test_a_rank_that_shares_too_few_collectives_gets_no_offset():
    ev = pl.DataFrame(
        {
            "instance": [0, 0, 1, 1, 2, 2, 0],
            "rank": [0, 1, 0, 1, 0, 1, 2],
            "exit_ns": [10, 12, 20, 21, 30, 33, 15],
        }
    )
    est = clocks.estimate_offsets(ev)
    assert set(est.offset_ns) == {0, 1}


def _spans(blocks: dict[int, list[tuple[str, int]]]) -> list:
    out = []
    t = 0
    for tid, labels in blocks.items():
        for name, numel in labels:
            t += 1000
            out.append(kineto_scan.Span(tid, t, t + 500, name, numel, "float32"))
    return out


def test_gloo_worker_blocks_map_to_groups_the_members_agree_on():
    """Rank 1 belongs to groups 0, 1, 2 but group 1 ran nothing: its second block of
    worker threads is group 2's, as rank 0 (a member of 0 and 2 only) shows."""
    pg = lambda name, ranks: {"pg_name": name, "pg_size": len(ranks), "ranks": ranks}  # noqa: E731
    ar, ag = ("gloo:all_reduce", 100), ("gloo:all_gather", 50)
    scans = {
        0: kineto_scan.RankScan(
            rank=0,
            pg_config=[pg("0", [0, 1]), pg("2", [0, 1])],
            spans=_spans({10: [ar, ar], 11: [ar], 20: [ag, ag]}),
        ),
        1: kineto_scan.RankScan(
            rank=1,
            pg_config=[pg("0", [0, 1]), pg("1", [1, 2]), pg("2", [0, 1])],
            spans=_spans({30: [ar], 31: [ar, ar], 40: [ag], 41: [ag]}),
        ),
    }
    groups = kineto_gloo.map_gloo_groups(scans, threads=2)
    assert groups[0] == {10: "0", 11: "0", 20: "2"}
    assert groups[1] == {30: "0", 31: "0", 40: "2", 41: "2"}


def test_missing_sequence_numbers_resync_at_every_step():
    """Rank 1's window starts one call late: only step 0 is affected."""
    rows = []
    for rank in (0, 1):
        for step in range(3):
            for k in range(3):
                if rank == 1 and step == 0 and k == 0:
                    continue
                rows.append((rank, step, "0", -1, -1, "all_reduce", step * 100 + k))
    ev = pl.DataFrame(
        rows, schema=["rank", "step", "group", "pair", "peer", "op", "call_ns"], orient="row"
    ).with_columns(seq=pl.lit(-1, pl.Int64))
    out = assign_seq(ev).sort("rank", "call_ns")
    r0 = out.filter(pl.col("rank") == 0)["seq"].to_list()
    r1 = out.filter(pl.col("rank") == 1)["seq"].to_list()
    assert r0 == list(range(9))
    assert r1 == [0, 1, 3, 4, 5, 6, 7, 8]  # the k-th call of a step: same seq on both


def test_element_types_in_every_spelling():
    assert dtypes.canonical("Float") == dtypes.canonical("float") == "float32"
    assert dtypes.canonical("c10::BFloat16") == dtypes.canonical("BFloat16") == "bfloat16"
    assert dtypes.canonical("long int") == dtypes.canonical("Long") == "int64"
    assert dtypes.canonical("torch.float16") == "float16"
    assert dtypes.canonical("TensorList") == "" and dtypes.item_size("") == 0
    assert dtypes.item_size("bfloat16") == 2


def test_a_trace_that_names_no_rank_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [event("aten::mm", 1.0)]}))
    with pytest.raises(TraceError, match="cannot tell which rank wrote this trace"):
        kineto_scan.scan_file(path, None, [])
    named = tmp_path / "worker_rank5.json"
    named.write_text(path.read_text())
    assert kineto_scan.scan_file(named, None, []).rank == 5


def test_a_folder_as_users_have_it(tmp_path):
    """Other JSON next to the traces is skipped, a trace kept both plain and gzip'd is
    read once, and both are said."""
    calls = [event("c10d::allreduce_", float(i), **{"Input Dims": [[[4]]]}) for i in range(5)]
    text = chrome_trace(calls, trace_id="ABC")
    (tmp_path / "rank3.pt.trace.json").write_text(text)
    (tmp_path / "rank3.pt.trace.json.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    files = sorted(tmp_path.iterdir())
    warnings: list[str] = []
    scans = kineto_scan.scan_all(files, None, warnings)
    assert list(scans) == [3] and len(scans[3].calls) == 5
    assert warnings == [
        "1 JSON file(s) are not profiler traces: config.json",
        "1 trace(s) are here twice, read once: rank3.pt.trace.json.gz",
    ]


def test_inputs_that_are_not_there_are_one_line(tmp_path):
    with pytest.raises(TraceError, match="no such file or directory"):
        convert("kineto", [tmp_path / "nope"], tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match=r"no PyTorch profiler traces here \(looked for \*\.json"):
        convert("kineto", [tmp_path / "empty"], tmp_path / "out")


def test_settings_are_validated():
    with pytest.raises(ConfigError, match="timing: must be one of auto, host, device"):
        ImportConfig(timing="gpu")
    with pytest.raises(ConfigError, match=r"window_ms: must be in \(0, 3600000\]"):
        ImportConfig(window_ms=0)


def test_the_registry_lists_every_format():
    assert list(FORMATS) == ["kineto", "nccl-inspector", "flight-recorder"]
    assert available()["kineto"] and available()["nccl-inspector"]
    assert all(available().values())  # every format converts in this build


def test_a_converted_rank_of_many_batches_loads_whole(tmp_path):
    """More calls per rank than one Arrow batch holds (65,536): every batch passes the
    reader's checksum, so no call is left out as damaged."""
    n = 70_000
    seq = pl.int_range(n, eager=True)

    def rank(r: int) -> RankFrame:
        events = pl.DataFrame(
            {
                "group": "0",
                "group_size": 2,
                "seq": seq,
                "op": "all_reduce",
                "bytes": 4096,
                "dtype": "float32",
                "peer": -1,
                "enter_ns": 1_000_000_000 + seq * 10_000 + r * 1_000,
                "exit_ns": 1_000_000_000 + seq * 10_000 + 5_000,
                "timing": "profiler_call",
                "status": "completed",
                "error": None,
                "wait_ns": -1,
                "call_ns": 1_000_000_000 + seq * 10_000 + r * 1_000,
            },
            schema=INPUT_COLUMNS,
        )
        return RankFrame(rank=r, events=events, host="h")

    request = Request("kineto", (), ImportConfig(), 0, lambda n: None)
    write_trace(Conversion([rank(0), rank(1)], source="t"), request, tmp_path)
    trace = load_trace(tmp_path)
    assert trace.warnings == ()
    assert trace.events.height == 2 * n
    assert trace.events.filter(pl.col("rank") == 1)["seq"].to_list() == list(range(n))
