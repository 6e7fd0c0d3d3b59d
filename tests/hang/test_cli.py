"""``syncpace hang`` on run directories written to disk, one per node."""

from __future__ import annotations

import json

from builders import LOADER, USER, WORLD, healthy_prefix, inflight, meta, stall

from syncpace.cli.main import main
from syncpace.trace.stall import stall_path, write_stall
from syncpace.trace.writer import RankTraceWriter


def write_run(dirs, events, stalls):
    """Ranks 0-1 into dirs[0], ranks 2-3 into dirs[1], as two nodes would."""
    for rank in range(WORLD):
        out = dirs[rank * len(dirs) // WORLD]
        writer = RankTraceWriter(out, rank, meta(rank))
        for row in events:
            if row[0] == rank:
                writer.add_event(row)
        writer.flush()
        writer._closed = True  # a hung rank: its streams stay open, unfinished
        writer._wake.set()
        if rank in stalls:
            write_stall(stall_path(out, rank), stalls[rank])


def test_hang_joins_per_node_directories(tmp_path, capsys):
    dirs = [tmp_path / "h0", tmp_path / "h1"]
    stalls = {r: stall(r, in_flight=[inflight(5, 5.0)]) for r in (0, 1, 3)}
    stalls[2] = stall(2, kind="no_progress", frames=(USER, LOADER))
    write_run(dirs, healthy_prefix(), stalls)
    assert main(["hang", "--json", *map(str, dirs)]) == 1
    shown = json.loads(capsys.readouterr().out)
    finding = shown["finding"]
    assert finding["mode"] == "hang" and finding["ranks"] == [2]
    assert finding["evidence"]["waiting"] == [0, 1, 3]
    assert shown["hang"]["stall_records"] == WORLD
    assert main(["hang", str(dirs[0])]) == 1  # one node alone: ranks 2-3 have no trace
    out = capsys.readouterr().out
    assert "absent" in out or "no trace" in out


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["hang", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("syncpace hang: error: ") and "nowhere" in err
    assert len(err.splitlines()) == 1
    assert main(["hang", "--world-size", "0", str(tmp_path)]) == 2
    assert "--world-size must be >= 1" in capsys.readouterr().err
