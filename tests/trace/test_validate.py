"""The validation rules, one by one, with the exact line each refusal or warning says."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pyarrow as pa
import pytest

from syncpace.errors import TraceError
from syncpace.trace import RankTraceWriter, load_trace
from syncpace.trace.validate.completeness import completeness_lines

WORLD = 2


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("good")
    for rank in range(WORLD):
        w = RankTraceWriter(root, rank, {"world_size": WORLD, "host": "h"})
        for s in range(4):
            for i in range(3):
                seq = 3 * s + i
                w.add_event(
                    (
                        rank,
                        s,
                        "0",
                        WORLD,
                        seq,
                        "all_reduce",
                        64,
                        "float32",
                        -1,
                        1000 * seq,
                        1000 * seq + 500,
                        "future",
                        "completed",
                        None,
                        -1,
                    )
                )
            w.add_step((rank, s, 3000 * s, 3000 * s + 2900, 0))
            w.flush()
        w.close()
    return root  # fmt: skip


@pytest.fixture
def run(good, tmp_path) -> Path:
    root = tmp_path / "run"
    shutil.copytree(good, root)
    return root


def _table(path: Path) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()


def _write(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def _refusal(root: Path) -> str:
    def hang(*_):
        raise AssertionError("load_trace hung")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        with pytest.raises(TraceError) as info:
            load_trace(root)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_fifo_is_refused_at_once(run):
    meta = run / "rank-00001.meta.json"
    meta.unlink()
    os.mkfifo(meta)
    assert _refusal(run) == f"{meta}: is a FIFO, not a regular file (refused, not read)"


def test_a_link_to_dev_zero_is_refused(run):
    events = run / "rank-00000.events.arrow"
    events.unlink()
    events.symlink_to("/dev/zero")
    assert (
        _refusal(run) == f"{events}: is a character device, not a regular file (refused, not read)"
    )  # noqa: E501


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("finished", "false", "Expected `bool`, got `str` - at `$.finished`"),
        (
            "clock",
            {"offset_ns": "12ms"},
            "Expected `int | null`, got `str` - at `$.clock.offset_ns`",
        ),
        ("host", {"name": "x"}, "Expected `str`, got `object` - at `$.host`"),
        ("world_size", 2**40, "Expected `int` <= 1048576 - at `$.world_size`"),
    ],
)
def test_metadata_of_the_wrong_type_names_the_key(run, key, value, message):
    path = run / "rank-00001.meta.json"
    meta = json.loads(path.read_text())
    meta[key] = value
    path.write_text(json.dumps(meta))
    assert _refusal(run) == f"{path}: invalid metadata: {message}"


def test_nan_and_huge_numbers_are_not_json(run):
    path = run / "rank-00001.meta.json"
    path.write_text(path.read_text().replace('"dropped_events": 0', '"dropped_events": NaN'))
    assert _refusal(run).startswith(f"{path}: not valid JSON (JSON is malformed")
    path.write_text('{"schema": "syncpace.trace", "x": ' + "9" * 5000 + "}")
    assert _refusal(run) == f"{path}: not usable JSON (Integer value out of range - at `$[...]`)"


def test_a_second_file_for_one_rank_refuses_the_directory(run):
    shutil.copy(run / "rank-00001.meta.json", run / "rank-000001.meta.json")
    assert "a second metadata file for rank 1" in _refusal(run)


def test_a_cut_at_a_batch_boundary_is_found(run):
    path = run / "rank-00001.events.arrow"
    reader = pa.ipc.open_stream(pa.py_buffer(path.read_bytes()))
    batches = list(reader)
    with pa.OSFile(str(path), "wb") as sink:
        writer = pa.ipc.new_stream(sink, reader.schema)
        for batch in batches[:3]:  # the empty first batch and two steps; no end marker
            writer.write_batch(batch)
    trace = load_trace(run)
    assert f"{path}: 6 events found, fewer than the 12 the metadata declares" in trace.warnings
    assert any("ends without its end-of-stream marker although rank 1 finished" in w
               for w in trace.warnings)  # fmt: skip
    c = trace.completeness[1]
    assert (c.events_declared, c.events_found, c.events_missing, c.cut) == (12, 6, 6, ("events",))
    # what every verb prints: each count on its own line, none wider than a terminal
    lines = completeness_lines(trace.completeness, [], trace.world_size)
    events, steps = trace.events.height, trace.steps.height
    assert lines[:3] == [
        "completeness: 2 of 2 ranks",
        f"  events: {events} kept of {events} found (24 declared)",
        f"  steps: {steps} kept of {steps} found",
    ]
    assert lines[3].startswith("  rank 1: events 6 found of 12 declared")
    assert max(map(len, lines)) <= 80, lines


def test_rows_breaking_the_format_are_left_out_and_counted(run):
    path = run / "rank-00000.events.arrow"
    table = _table(path)
    enter = table.column("enter_ns").to_pylist()
    enter[2] = 2**63 - 1
    op = table.column("op").to_pylist()
    op[5] = "all_reduse"
    rank = table.column("rank").to_pylist()
    rank[7] = 1
    for name, values in (("enter_ns", enter), ("op", op), ("rank", rank)):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pa.array(values, table.schema.field(name).type))
    _write(path, table)
    trace = load_trace(run)
    assert trace.events.filter(trace.events["rank"] == 0).height == 9
    assert (
        f"{path}: 3 of 12 events left out as invalid (1 rank column not 0, 1 unknown op, "
        "1 enter_ns out of range)"
    ) in trace.warnings
    assert trace.completeness[0].events_invalid == 3


def test_duplicate_and_backward_steps_are_left_out(run):
    path = run / "rank-00001.steps.arrow"
    table = _table(path)
    _write(path, pa.concat_tables([table, table.slice(1, 1), table.slice(0, 1)]))
    trace = load_trace(run)
    assert trace.steps.filter(trace.steps["rank"] == 1)["step"].to_list() == [0, 1, 2, 3]
    assert f"{path}: 2 of 6 steps left out as invalid (2 duplicate step)" in trace.warnings


def test_a_flipped_value_fails_its_batch_checksum(run):
    path = run / "rank-00001.events.arrow"
    data = bytearray(path.read_bytes())
    value = (3000).to_bytes(8, "little")  # enter_ns of seq 3, in the second step's batch
    at = data.index(value)
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    trace = load_trace(run)
    assert f"{path}: batch(es) 2 fail their checksum: 3 events left out" in trace.warnings
    assert trace.events.filter(trace.events["rank"] == 1).height == 9


@pytest.mark.parametrize("name", ["rank-00001.steps.arrow", "rank-00001.events.arrow"])
def test_a_schema_whose_metadata_is_not_utf8_is_read_with_the_formats_own(run, name, tmp_path):
    from syncpace.cli.main import main
    from syncpace.trace import schema
    from syncpace.trace.validate.stream import Stream

    path = run / name
    data = bytearray(path.read_bytes())
    data[data.index(b"syncpace.trace") + 1] = 0xFF  # the schema's metadata: not UTF-8
    path.write_bytes(bytes(data))
    expected = schema.STEPS if "steps" in name else schema.EVENTS
    batches = list(Stream(path, expected, mapped=False).batches())
    assert batches and all(b.schema.metadata == expected.metadata for b in batches)
    # the streaming export hands such batches to polars, which panicked on them
    assert main(["export", "--perfetto", str(run), "-o", str(tmp_path / "t.json")]) == 0
    assert main(["diagnose", str(run)]) == 0
    assert load_trace(run).events.height == 2 * 12


def test_edited_metadata_is_read_with_a_warning(run):
    path = run / "rank-00000.meta.json"
    path.write_text(path.read_text().replace('"host": "h"', '"host": "g"'))
    trace = load_trace(run)
    assert trace.meta[0]["host"] == "g"
    assert (
        f"{path}: its checksum does not match its content (edited by hand, or damaged)"
        in trace.warnings
    )


def test_an_intact_trace_has_no_warnings_and_a_complete_account(good):
    trace = load_trace(good)
    assert trace.warnings == ()
    assert not any(c.lossy for c in trace.completeness.values())
    assert trace.completeness[1].events_declared == trace.completeness[1].events_found == 12
    events, steps = trace.events.height, trace.steps.height
    assert completeness_lines(trace.completeness, [], trace.world_size) == [
        f"completeness: 2 of 2 ranks, all {events} events and {steps} steps kept"
    ]


def _messages(data: bytes) -> list[tuple[int, int, str, int]]:
    """``(offset, metadata length, type, body length)`` of each message of a stream."""
    out, at = [], 0
    while at + 8 <= len(data):
        meta = int.from_bytes(data[at + 4 : at + 8], "little")
        if meta == 0:  # the end-of-stream marker
            break
        message = pa.ipc.read_message(pa.BufferReader(data[at:]))
        out.append((at, meta, message.type, message.body.size))
        at += 8 + meta + message.body.size
    return out


@pytest.mark.parametrize("length", ["metadata", "body"])
@pytest.mark.parametrize("huge", [2**31 - 1, 2**40, 2**62])
def test_a_damaged_length_ends_the_stream_without_allocating_it(run, length, huge):
    """A length that claims more than the file holds: the batches before it are read,
    the stream is cut there, and nothing of that size is allocated (a MemoryError)."""
    from syncpace.trace import schema
    from syncpace.trace.validate.stream import Stream

    path = run / "rank-00001.events.arrow"
    data = bytearray(path.read_bytes())
    read = list(Stream(path, schema.EVENTS, mapped=False).batches())
    batches = [m for m in _messages(bytes(data)) if m[2] == "record batch"]
    assert len(read) >= 2 and len(batches) >= len(read)
    at, meta, _, body = batches[-1]
    if length == "metadata":
        data[at + 4 : at + 8] = min(huge, 2**31 - 1).to_bytes(4, "little")
    else:  # the body length is an int64 in the message's metadata
        where = data.index(body.to_bytes(8, "little"), at + 8, at + 8 + meta)
        data[where : where + 8] = huge.to_bytes(8, "little")
    path.write_bytes(bytes(data))
    stream = Stream(path, schema.EVENTS, mapped=False)
    kept = list(stream.batches())
    assert [b.num_rows for b in kept] == [b.num_rows for b in read[:-1]]
    rows = sum(b.num_rows for b in kept)
    assert stream.cut is not None and stream.cut.startswith(f"cut short after {rows:,} rows (")


def test_batches_rewritten_without_their_checksums_are_said(run):
    path = run / "rank-00001.events.arrow"
    table = _table(path)
    sizes = table.column("bytes").to_pylist()
    sizes[4] *= 2  # another valid size: only the missing checksums can tell
    _write(path, table.set_column(table.schema.get_field_index("bytes"), "bytes", pa.array(sizes)))
    trace = load_trace(run)
    said = [w for w in trace.warnings if "carry no checksum" in w]
    assert said == [
        f"{path}: batch(es) 1, 2, 3, 4 carry no checksum though its writer checksums every "
        "batch "
        f"(rewritten by another program?): {table.num_rows:,} events checked only against "
        "the format's rules"
    ]
    assert sorted(trace.events.filter(trace.events["rank"] == 1)["bytes"]) == sorted(sizes)


def test_a_trace_from_before_checksums_reads_without_that_warning(tmp_path):
    fixture = Path(__file__).resolve().parents[1] / "data" / "straggler"
    assert not any(  # written before the writer checksummed its metadata and batches
        '"crc32"' in p.read_text() for p in fixture.glob("rank-*.meta.json")
    )
    assert not [w for w in load_trace(fixture).warnings if "checksum" in w]


def test_a_prefetching_stream_keeps_the_kernel_ahead_and_reads_the_same(good, monkeypatch):
    """Read with a bounded read-ahead of its own: the kernel's is switched off for the
    file, each batch lies within what was asked for before it is read, no more than
    the allowance is asked for past it, and the batches are those read without."""
    from syncpace.trace import schema
    from syncpace.trace.validate.stream import Stream

    path = good / f"{schema.rank_stem(0)}{schema.EVENTS_SUFFIX}"
    plain = list(Stream(path, schema.EVENTS, mapped=False).batches())
    calls: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append((offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    prefetch = 64
    stream = Stream(path, schema.EVENTS, mapped=False, prefetch=prefetch)
    read, asked = [], 0
    for batch in stream.batches():
        asked = max(o + n for o, n, a in calls if a == os.POSIX_FADV_WILLNEED)
        assert stream.offset < asked <= stream.offset + 2 * prefetch + 1024
        read.append(batch)
    assert calls[0] == (0, 0, os.POSIX_FADV_RANDOM)
    willneed = [(o, n) for o, n, a in calls if a == os.POSIX_FADV_WILLNEED]
    assert all(o == p + q for (p, q), (o, _) in zip(willneed, willneed[1:], strict=False))
    assert [b.to_pylist() for b in read] == [b.to_pylist() for b in plain]
