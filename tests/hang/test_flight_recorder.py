"""Flight Recorder dumps built to the format torch 2.13 writes (version "2.10").

The real dumps torch writes during hung gloo jobs are tested in ``test_jobs.py``; these
cover what those cannot: an NCCL-style dump (``pg_config`` with group names, entries
``started``/``completed``), a rank whose dump is missing, the JSON form, and dumps that
are damaged or crafted to run code.
"""

from __future__ import annotations

import json
import os
import pickle

import pytest

from syncpace.analysis import find_hang
from syncpace.cli.main import main
from syncpace.errors import TraceError
from syncpace.importers.flight_recorder import (
    is_dump_dir,
    load_dumps,
    load_flight_recorder,
    read_dump,
)
from syncpace.trace import load_trace

WORLD = 4
T0 = 1_764_590_000_000_000_000


def entry(
    seq,
    op="all_reduce",
    state="completed",
    retired=True,
    numel=1024,
    t=0,
    line=40,
    dtype="Float",
    group=("0", "default_pg"),
    backend="nccl",
):
    out_numel = numel * WORLD if op == "all_gather" else numel
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": group,
        "collective_seq_id": seq + 1,  # Flight Recorder counts from 1
        "p2p_seq_id": 0,
        "op_id": seq + 1,
        "profiling_name": f"{backend}:{op}",
        "time_created_ns": T0 + t,
        "duration_ms": 1.0,
        "input_sizes": [[numel]],
        "input_dtypes": [dtype],
        "output_sizes": [[out_numel]],
        "output_dtypes": [dtype],
        "state": state,
        "time_discovered_started_ns": T0 + t + 10,
        "time_discovered_completed_ns": T0 + t + 100 if state == "completed" else None,
        "retired": retired,
        "timeout_ms": 600000,
        "is_p2p": False,
        "frames": [  # innermost first, as Flight Recorder writes them
            {
                "name": "all_reduce",
                "filename": "/env/torch/distributed/distributed_c10d.py",
                "line": 3245,
            },
            {"name": "train_step", "filename": "/job/train.py", "line": line},
        ],
        "thread_id": "1",
        "thread_name": "python",
    }


def dump(entries, ranks=range(WORLD)):
    return {
        "version": "2.10",
        "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(ranks))}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": 0,
                "last_started_collective": 0,
                "last_completed_collective": 0,
            }
        },
        "entries": entries,
    }


def write(tmp_path, per_rank, name="nccl_trace_rank_", as_json=False):
    for rank, d in per_rank.items():
        path = tmp_path / f"{name}{rank}"
        path.write_text(json.dumps(d)) if as_json else path.write_bytes(pickle.dumps(d))
    return tmp_path


def dataloader_hang(tmp_path, **kw):
    """Ranks 0, 1, 3 wait in all_reduce seq 5 (collective_seq_id 6); rank 2 stopped
    after seq 4, in its data loader."""
    per_rank = {}
    for rank in range(WORLD):
        entries = [entry(s, t=s * 1000) for s in range(5)]
        if rank != 2:
            entries.append(entry(5, state="started", retired=False, t=9000, line=41))
        per_rank[rank] = dump(entries)
    return write(tmp_path, per_rank, **kw)


def test_a_hang_from_nccl_style_dumps(tmp_path):
    trace = load_flight_recorder([dataloader_hang(tmp_path)])
    assert trace.world_size == WORLD and sorted(trace.stalls) == [0, 1, 2, 3]
    _, f = find_hang(trace)
    e = f.evidence
    assert (f.mode, e["group"], e["seq"], e["op"], e["bytes"], e["dtype"]) == (
        "hang",
        "0",
        5,
        "all_reduce",
        4096,
        "float32",
    )
    assert f.ranks == (2,) and e["waiting"] == [0, 1, 3]
    assert e["missing"][0]["state"] == "stuck" and e["source"] == "flight_recorder"
    stacks = {s["rank"]: s for s in e["stacks"]}
    assert stacks[2]["frames"][-1] == "all_reduce (/env/torch/distributed/distributed_c10d.py:3245)"
    assert "train_step (/job/train.py:40)" in stacks[2]["frames"]  # its last call's stack
    assert "Flight Recorder" in stacks[2]["source"]


def test_json_dumps_read_the_same(tmp_path):
    _, f = find_hang(load_flight_recorder([dataloader_hang(tmp_path, as_json=True)]))
    assert (f.mode, f.evidence["seq"], f.ranks) == ("hang", 5, (2,))


def test_a_missing_dump_is_a_rank_with_no_trace(tmp_path):
    per_rank = {
        r: dump([entry(s) for s in range(3)] + [entry(3, "all_reduce", "scheduled", False)])
        for r in (0, 1, 2)
    }
    trace = load_flight_recorder([write(tmp_path, per_rank)])
    assert trace.world_size == WORLD and trace.missing_ranks == [3]
    assert any("no Flight Recorder dump: [3]" in w for w in trace.warnings)
    _, f = find_hang(trace)
    assert f.ranks == (3,) and f.evidence["missing"][0]["state"] == "absent"


def test_a_size_mismatch_in_dumps_is_a_desync(tmp_path):
    per_rank = {
        r: dump(
            [entry(0), entry(1, state="started", retired=False, numel=2048 if r == 1 else 1024)]
        )
        for r in range(WORLD)
    }
    _, f = find_hang(load_flight_recorder([write(tmp_path, per_rank)]))
    assert f.mode == "desync" and f.ranks == (1,)
    sides = {s["value"]: s["ranks"] for s in f.evidence["mismatch"]["sides"]}
    assert sides == {"4096": [0, 2, 3], "8192": [1]}


def test_gathered_sizes_count_the_output_and_dtypes_map(tmp_path):
    per_rank = {0: dump([entry(0, op="_all_gather_base", numel=10, dtype="BFloat16")])}
    trace = load_flight_recorder([write(tmp_path, per_rank)], world_size=WORLD)
    row = trace.events.row(0, named=True)
    assert (row["op"], row["bytes"], row["dtype"], row["seq"]) == (
        "all_gather",
        10 * 2,
        "bfloat16",
        0,
    )


def test_ranks_come_from_file_names_and_dumps_are_recognised(tmp_path):
    dataloader_hang(tmp_path)
    (tmp_path / "notes.txt").write_text("not a dump")
    assert is_dump_dir(tmp_path)
    assert [d.rank for d in load_dumps([tmp_path])] == [0, 1, 2, 3]
    assert read_dump(tmp_path / "nccl_trace_rank_3").rank == 3
    (tmp_path / "rank-00000.meta.json").write_text("{}")
    assert not is_dump_dir(tmp_path)  # a syncpace run directory wins


def test_a_crafted_pickle_cannot_run_code(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [], "x": Evil()}))
    with pytest.raises(TraceError, match="refusing to load posix.system"):
        read_dump(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "content, problem",
    [
        (pickle.dumps({"version": "1.0", "entries": []}), "version '1.0' is not supported"),
        (pickle.dumps({"entries": []}), "no 'entries' and 'version'"),
        (pickle.dumps({"version": "2.10", "entries": [{"state": "x"}]}), "lacks 'process_group'"),
        (b"\x80\x04garbage", "not a Flight Recorder dump"),
        (b"{nope", "not a Flight Recorder JSON dump"),
    ],
)
def test_damaged_dumps_are_one_clear_error(tmp_path, content, problem):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=problem):
        read_dump(path)


def test_a_dump_that_is_not_a_regular_file_is_refused(tmp_path):
    """A device's size is 0: ``/dev/zero`` under a dump's name was read until the
    memory ran out. A FIFO is refused without waiting for a writer."""
    with pytest.raises(TraceError, match="is a character device, not a regular file"):
        read_dump("/dev/zero", rank=0)
    fifo = tmp_path / "nccl_trace_rank_0"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="is a FIFO, not a regular file"):
        read_dump(fifo)


def test_the_hang_verb_on_dumps(tmp_path, capsys):
    d = dataloader_hang(tmp_path)
    assert main(["hang", str(d)]) == 1
    out = capsys.readouterr().out
    assert "HANG at all_reduce seq 5 of group 0" in out and "rank 2" in out
    assert main(["hang", "--json", str(d)]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["finding"]["ranks"] == [2] and shown["hang"]["source"] == "flight_recorder"
    (tmp_path / "nccl_trace_rank_1").write_bytes(b"\x80\x04garbage")
    assert main(["hang", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("syncpace hang: error: ") and "nccl_trace_rank_1" in err
    assert len(err.strip().splitlines()) == 1


def test_converted_dumps_give_the_same_hang(tmp_path, capsys):
    """`syncpace import flight-recorder` writes the dumps as a run directory: the same
    calls, a stall record per rank, and the same hang as the dumps read in place."""
    (tmp_path / "dumps").mkdir()
    dumps = dataloader_hang(tmp_path / "dumps")
    out = tmp_path / "run"
    assert main(["import", "flight-recorder", str(dumps), "--out", str(out)]) == 0
    capsys.readouterr()
    direct, converted = load_flight_recorder([dumps]), load_trace(out)
    assert converted.warnings == ()
    key = ["rank", "group", "seq", "op", "bytes", "dtype", "status", "enter_ns", "exit_ns"]
    assert (
        converted.events.select(key).sort(key).to_dicts()
        == direct.events.select(key).sort(key).to_dicts()
    )
    assert len(converted.events) == 4 * 5 + 3
    assert {r: s.to_json() for r, s in converted.stalls.items()} == {
        r: s.to_json() for r, s in direct.stalls.items()
    }
    imported = converted.meta[0]["import"]
    assert imported["format"] == "flight-recorder"
    assert any("iterations" in m for m in imported["missing"])
    (_, want), (_, got) = find_hang(direct), find_hang(converted)
    assert (
        (got.mode, got.ranks, got.evidence["seq"], got.evidence["waiting"])
        == (
            want.mode,
            want.ranks,
            want.evidence["seq"],
            want.evidence["waiting"],
        )
        == ("hang", (2,), 5, [0, 1, 3])
    )
