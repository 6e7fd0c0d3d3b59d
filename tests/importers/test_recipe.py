"""The recipe of docs/imports.md ("Adding an importer"), followed by a test.

The format is written here, outside the package, the way code of one's own extends it:
a converter class, its ``CONVERTER``, and a ``Format`` registered with
``importers.register`` (inside the package the same steps add a line to ``FORMATS``).
What comes out must be what the built-in formats give: ``syncpace import`` takes it
like the others, and ``syncpace trace-info`` reads the run directory it writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import pytest

from syncpace import importers
from syncpace.cli.main import main
from syncpace.errors import TraceError
from syncpace.importers import (
    INPUT_COLUMNS,
    UNKNOWN,
    Conversion,
    Format,
    RankFrame,
    Request,
    sources,
)
from syncpace.trace.reader import load_trace

# The made-up format: one file per rank, ``rank<N>.calls``; a header line naming the
# rank and its host, then one line per collective: ``step op bytes enter_us exit_us``.
# Every rank is in one all-reduce group; the format records no sequence numbers.

RANK0 = """\
# rank 0 host node-a
0 all_reduce 4096 100 180
1 all_reduce 4096 300 370
1 broadcast 64 372 380
2 all_reduce 4096 500 590
"""
RANK1 = """\
# rank 1 host node-a
0 all_reduce 4096 130 181
1 all_reduce 4096 310 371
1 broadcast 64 375 381
2 all_reduce 4096 560 592
"""


# Step 1: the converter ------------------------------------------------------------------


class ToyCalls:
    """``rank<N>.calls`` files: one rank each."""

    options: tuple[str, ...] = ()

    def find(self, srcs: Sequence[Path]) -> list[Path]:
        return sources.find_files(srcs, (".calls",), "toy call logs")

    def read(self, request: Request) -> Conversion:
        ranks = []
        for path in request.files:
            text = path.read_text()
            request.on_bytes(len(text.encode()))
            ranks.append(_rank(path, text))
        return Conversion(
            ranks=ranks,
            world_size=2,
            missing=("dtypes (the format records none)",),
            notes={"toy_version": 1},
        )


def _rank(path: Path, text: str) -> RankFrame:
    """One file: its header, and its calls in the importers' input columns."""
    header, *lines = text.splitlines()
    words = header.split()
    if words[:2] != ["#", "rank"] or len(words) != 5:
        raise TraceError(path, "no '# rank N host H' header")
    rows = [line.split() for line in lines if line.strip()]
    events = pl.DataFrame(
        {
            "group": "0",
            "group_size": 2,
            "seq": UNKNOWN,  # numbered by the writer
            "op": [r[1] for r in rows],
            "bytes": [int(r[2]) for r in rows],
            "dtype": "",
            "peer": -1,
            "enter_ns": [int(r[3]) * 1000 for r in rows],
            "exit_ns": [int(r[4]) * 1000 for r in rows],
            "timing": "call",
            "status": "completed",
            "error": None,
            "wait_ns": -1,
            "call_ns": [int(r[3]) * 1000 for r in rows],
        }
    ).cast(INPUT_COLUMNS)  # type: ignore[arg-type]
    # each step spans its calls, from 50 µs before the first to 10 µs after the last
    steps = (
        events.with_columns(step=pl.Series([int(r[0]) for r in rows], dtype=pl.Int64))
        .group_by("step")
        .agg(start_ns=pl.col("enter_ns").min() - 50_000, end_ns=pl.col("exit_ns").max() + 10_000)
        .sort("step")
    )
    return RankFrame(
        rank=int(words[2]),
        events=events,
        steps=steps,
        step_rule="spans",
        host=words[4],
        backend="gloo",
        groups={"0": {"ranks": [0, 1], "backend": "gloo"}},
        files=[str(path)],
    )


CONVERTER = ToyCalls()


# Step 2: the format, registered ---------------------------------------------------------

TOY = Format("toy-calls", __name__, "toy call logs, one file per rank")


@pytest.fixture
def toy_format() -> Iterator[Format]:
    importers.register(TOY)
    yield TOY
    importers.unregister(TOY.name)


@pytest.fixture
def toy_logs(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.calls").write_text(RANK0)
    (logs / "rank1.calls").write_text(RANK1)
    (logs / "notes.txt").write_text("not a log: no .calls ending")
    return logs


# Step 3: it converts, and trace-info reads it -------------------------------------------


def test_an_importer_added_by_the_recipe_writes_what_trace_info_reads(
    toy_format: Format, toy_logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["import", toy_format.name, str(toy_logs), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["format"], result["world_size"], result["ranks"]) == ("toy-calls", 2, [0, 1])
    assert result["events"] == 8 and result["input_files"] == 2
    assert result["input_bytes"] == len(RANK0) + len(RANK1)
    assert result["missing"] == ["dtypes (the format records none)"]

    assert main(["trace-info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["world_size"] == 2 and info["ranks_present"] == [0, 1]
    assert info["events_per_rank"] == {"0": 4, "1": 4}
    assert info["events_per_op"] == {
        "all_reduce": {"count": 6, "bytes": 6 * 4096},
        "broadcast": {"count": 2, "bytes": 2 * 64},
    }
    assert info["hosts"] == {"node-a": [0, 1]} and info["steps"] == 3
    assert info["warnings"] == []

    meta = json.loads((out / "rank-00001.meta.json").read_text())
    assert meta["source"] == "toy-calls" and meta["import"]["toy_version"] == 1
    assert meta["import"]["files"] == [str(toy_logs / "rank1.calls")]
    # the writer numbered the calls of the group in order, counting across steps
    events = load_trace(out).events.filter(pl.col("rank") == 1).sort("enter_ns")
    assert events["seq"].to_list() == [0, 1, 2, 3]


def test_the_registered_format_is_listed_and_refused_once_gone(
    toy_format: Format, toy_logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert importers.available()[toy_format.name]
    assert isinstance(importers.converter(toy_format.name), importers.Converter)
    importers.unregister(toy_format.name)
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        main(["import", toy_format.name, str(toy_logs), "--out", str(tmp_path / "run")])
    assert "invalid choice: 'toy-calls'" in capsys.readouterr().err


def test_progress_counts_the_bytes_the_converter_reports(
    toy_format: Format, toy_logs: Path, tmp_path: Path
) -> None:
    seen: list[tuple[int, int]] = []
    importers.convert(
        toy_format.name, [toy_logs], tmp_path / "run", progress=lambda *p: seen.append(p)
    )
    total = len(RANK0) + len(RANK1)
    assert seen == [(len(RANK0), total), (total, total)]
