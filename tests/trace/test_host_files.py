"""The host files beside a trace (``host-H.meta.json``, ``host-H.counters.arrow``) are
evidence: damaged, they become one warning naming the file, and the trace still loads."""

from __future__ import annotations

import pyarrow as pa
import pytest

from syncpace.trace import RankTraceWriter, load_trace, schema
from syncpace.trace.hostwriter import host_paths, write_host_meta


def trace_with_host(tmp_path):
    w = RankTraceWriter(tmp_path, 0, {"world_size": 1, "host": "h"}, flush_interval_s=3600)
    w.close()
    return host_paths(tmp_path, "h")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"schema": "syncpace.host", "a": ' + "9" * 5000 + "}", "not usable JSON"),
        ("[" * 100_000 + "]" * 100_000, "not usable JSON"),
        ('{"schema": "syncpace.host", "topology": 7}', "invalid host facts"),
        (
            '{"schema": "syncpace.host", "topology": {"nics": [{"numa_node": 1}]}}',
            "invalid host facts",
        ),
        ('{"schema": "other"}', "not a syncpace host file"),
    ],
)
def test_damaged_host_facts_are_one_warning(tmp_path, text, problem):
    meta_path, _ = trace_with_host(tmp_path)
    meta_path.write_text(text)
    trace = load_trace(tmp_path)
    found = [w for w in trace.warnings if str(meta_path) in w]
    assert len(found) == 1 and problem in found[0] and "left out" in found[0]
    assert trace.hosts == {} and trace.counters.height == 0


def test_counter_rows_with_nulls_are_left_out_and_counted(tmp_path):
    meta_path, counters_path = trace_with_host(tmp_path)
    write_host_meta(meta_path, {"schema": schema.HOST_SCHEMA_NAME, "host": "h"})
    rows = {
        "time_ns": [1, 2, None],
        "host": ["h", "h", "h"],
        "source": ["nic", "nic", "nic"],
        "device": ["eth0", "eth0", "eth0"],
        "port": [-1, -1, -1],
        "counter": ["rx_bytes", "rx_bytes", "rx_bytes"],
        "value": [10, None, 30],
    }
    table = pa.table(rows, schema=schema.COUNTERS)
    with pa.OSFile(str(counters_path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    trace = load_trace(tmp_path)
    assert trace.counters["value"].to_list() == [10]
    assert any("2 of 3 counter rows left out as invalid" in w for w in trace.warnings)
