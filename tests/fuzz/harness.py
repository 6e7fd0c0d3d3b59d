"""Our own fuzzer: damage real traces, scenario files and command lines; classify what
every verb does with them.

Base traces come from the real producers: the per-rank writer (version 2, several
batches per stream, every call status) and a real traced DDP run (the version-1
fixture ``tests/data/real_ddp_straggler``). A :class:`Damage` names one thing done to
a fresh copy; :func:`run_trace_case` loads the copy with the library and runs the
verbs in-process (``trace-info`` and ``diagnose``, terminal and ``--json``, ``export
--perfetto``, optionally ``report``) under a wall-clock alarm, and classifies:

* ``clean`` - a one-line refusal naming the damaged file (or its directory), exit 2;
  or accepted with the damage reported (a warning or loss line naming the file or the
  rank, in the terminal output *and* the JSON); or the damage changed nothing.
* ``traceback`` - any other exception, or a refusal that is not one line naming the file.
* ``hang`` - past the alarm.
* ``silent`` - accepted, the data differ from the undamaged trace, and no output says so;
  or a hostile name printed raw (control characters reached the terminal output).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

import always_on_run
from multirank import run_ranks
from syncpace.analysis.wholerun import whole_run
from syncpace.cli.main import main
from syncpace.errors import SyncpaceError
from syncpace.trace import RankTraceWriter, load_trace

DATA = Path(__file__).resolve().parents[1] / "data"
WORKER = Path(__file__).resolve().parents[1] / "capture" / "workers" / "steps_job.py"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
WORLD = 3
STEPS = 6
PER_STEP = 4
INT64_MAX = 2**63 - 1

OUTCOMES = ("clean", "traceback", "hang", "silent")


class Hang(BaseException):
    """Raised by the alarm: a verb ran past its bound."""


@contextlib.contextmanager
def alarm(seconds: float):
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Base traces ---------------------------------------------------------------------------
def writer_trace(root: Path) -> Path:
    """A version-2 trace from the real writer: one batch per step, every status."""
    statuses = [
        ("completed", None, "future"),
        ("completed", None, "wait"),
        ("failed", "RuntimeError: peer closed", "wait"),
        ("unobserved", None, "unobserved"),
    ]
    for rank in range(WORLD):
        w = RankTraceWriter(
            root, rank, {"world_size": WORLD, "host": f"node{rank // 2}", "source": "torch"}
        )
        t = 1_000_000_000
        for s in range(STEPS):
            start = t
            for i in range(PER_STEP):
                seq = s * PER_STEP + i
                status, error, timing = statuses[(seq + rank) % len(statuses)] if s else statuses[0]
                enter = t + 1000 * rank
                exit_ns = -1 if status == "unobserved" else enter + 50_000
                wait_ns = enter + 10 if timing == "wait" else -1
                w.add_event((rank, s, "0", WORLD, seq, "all_reduce", 1 << 16, "float32", -1,
                             enter, exit_ns, timing, status, error, wait_ns))  # fmt: skip
                t += 100_000
            w.add_step((rank, s, start, t, 0))
            w.flush()
        w.update_meta(clock={"offset_ns": 0, "uncertainty_ns": 1000, "samples": []})
        w.close()
    return root


def real_run(root: Path) -> Path:
    """A version-2 trace of a real tiny traced job: 2 gloo ranks, 8 steps, flushed every
    0.2 s (several batches per stream)."""
    run_ranks(WORKER, 2, ["8", "60"], timeout=120, env={"TRACE_DIR": str(root)})
    return root


def always_on_trace(root: Path) -> Path:
    """An always-on run from the real writer: events rotated through segments (the
    oldest dropped to stay within the budget), per-step summaries of every step, and
    the live monitor's detection lines."""
    root.mkdir(parents=True, exist_ok=True)
    good = always_on_run.GOOD
    lines = {0: good, 1: good[:3]}  # rank 2 recorded none
    always_on_run.write_run(root, detections={r: len(lines.get(r, [])) for r in range(3)})
    always_on_run.write_detections(root, lines)
    return root


def base_traces(root: Path) -> dict[str, Path]:
    """The undamaged traces every case starts from, made once: the real writer's, a real
    tiny run's, an always-on run's and a version-1 trace of a real DDP run (the
    fixture). Version 1 carries no checksums, so a flipped byte is not drawn for it:
    there it is undetectable."""
    bases = {
        "writer": writer_trace(root / "writer"),
        "run": real_run(root / "run"),
        "always_on": always_on_trace(root / "always_on"),
    }
    v1 = root / "v1"
    shutil.copytree(DATA / "real_ddp_straggler", v1)
    bases["v1"] = v1
    return bases


# Damage --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Damage:
    base: str  # "writer" or "real"
    kind: str
    file: str  # the damaged file's name (or "" for the directory)
    params: tuple = ()
    #: A valid trace with hostile names: must be accepted and printed escaped.
    hostile: bool = False

    def __str__(self) -> str:
        return f"{self.base}:{self.kind}:{self.file}:{self.params}"


def _read_table(path: Path) -> tuple[pa.Table, list[pa.RecordBatch]]:
    reader = pa.ipc.open_stream(pa.py_buffer(path.read_bytes()))
    batches = list(reader)
    return pa.Table.from_batches(batches, schema=reader.schema), batches


def _write_table(path: Path, table: pa.Table, *, end: bool = True) -> None:
    sink = pa.OSFile(str(path), "wb")
    writer = pa.ipc.new_stream(sink, table.schema)
    for batch in table.to_batches(max_chunksize=max(table.num_rows // 3, 1)):
        writer.write_batch(batch)
    if end:
        writer.close()
    sink.close()


def _set_value(table: pa.Table, column: str, row: int, value: Any) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row % len(values)] = value
    index = table.schema.get_field_index(column)
    field_type = table.schema.field(column).type
    return table.set_column(index, column, pa.array(values, type=field_type))


#: Values that break a column's documented range, with the column they go into.
BAD_VALUES = {
    "events": [
        ("enter_ns", -5),
        ("enter_ns", INT64_MAX),
        ("exit_ns", INT64_MAX),
        ("exit_ns", -7),
        ("exit_ns", 3),  # before its enter, on a completed call
        ("wait_ns", INT64_MAX),
        ("wait_ns", 2),
        ("rank", 2**31 - 1),
        ("rank", -1),
        ("step", -1),
        ("seq", -3),
        ("bytes", -1),
        ("group_size", 0),
        ("group_size", 10**6),
        ("peer", 10**6),
        ("peer", -9),
        ("op", "all_reduse"),
        ("op", "[/]"),
        ("timing", "sundial"),
        ("status", "finished"),
    ],
    "steps": [
        ("start_ns", -1),
        ("start_ns", INT64_MAX),
        ("end_ns", INT64_MAX),
        ("end_ns", 0),  # before its start
        ("step", -2),
        ("rank", 77),
        ("pacing_delay_ns", -1),
        ("pacing_delay_ns", INT64_MAX),
    ],
    "summary": [
        ("rank", 77),
        ("step", -1),
        ("calls", -1),
        ("bytes", -1),
        ("comm_ns", -1),
        ("comm_ns", INT64_MAX),
        ("blocked_ns", -1),
        ("longest_ns", -4),
        ("failed", -1),
    ],
}

#: Lines of a detections file that are not detections: each must be left out, and said.
BAD_DETECTIONS = [
    b"not json",
    b'{"kind": "straggler", "state": "start", "step": 5, "rank": 99}',  # outside the world
    b'{"kind": "straggler", "state": "start", "step": 5}',  # a straggler without a rank
    b'{"kind": "straggler", "state": "start", "step": 5, "rank": 1, "since_step": 9}',
    b'{"kind": "straggler", "state": "start", "step": -5, "rank": 1}',
    b'{"kind": "straggler", "state": "start", "step": 1e30, "rank": 1}',
    b'{"kind": "straggler", "state": "start", "step": 5, "rank": 1, "share": NaN}',
    b'{"kind": "straggler", "state": "start", "step": 5, "rank": 1, "cost": 1e400}',
    b'{"kind": "straggler", "state": "begun", "step": 5, "rank": 1}',
    b'{"kind": "meteor", "state": "start", "step": 5}',
    b'{"kind": "step_time_jump", "state": "start", "step": 5, "median_s": -1}',
    b"[1, 2, 3]",
    b'{"kind": "straggler", "state": "start", "step": 5, "rank": 1' + b" " * 70_000 + b"}",
    b"\xff\xfe\x00",
]

#: Metadata keys and values of the wrong type or out of range.
BAD_META = [
    ("world_size", "3"),
    ("world_size", 0),
    ("world_size", 2**40),
    ("world_size", 3.0),
    ("rank", "0"),
    ("rank", -1),
    ("rank", True),
    ("host", {"name": "x"}),
    ("host", None),
    ("host", "h" * 10_000),
    ("finished", "false"),
    ("finished", 1),
    ("events_written", -1),
    ("events_written", "24"),
    ("steps_written", 1.5),
    ("dropped_events", "none"),
    ("clock", "12ms"),
    ("clock", {"offset_ns": "12ms"}),
    ("clock", {"uncertainty_ns": -4}),
    ("clock", {"samples": [{"local_ns": "x"}]}),
    ("device_clock", "cuda"),
    ("device_clock", {"uncertainty_ns": "12us", "source": 5}),
    ("device_clock", {"uncertainty_ns": 10**40, "resolved": -3}),
    ("device_clock", [1, 2]),
    ("groups", [1, 2]),
    ("groups", {"0": {"ranks": "all"}}),
    ("local_rank", "zero"),
    ("pacing", {"delay_max_s": "fast"}),
    ("pacing", {"policy_config": [1]}),
    ("schema_version", "2"),
    ("schema_version", 99),
    ("schema", "something.else"),
    ("config", "verbose"),
    ("topology", 7),
]

#: Raw metadata texts that are not usable JSON.
BAD_META_TEXT = [
    '{"schema": "syncpace.trace", "schema_version": 2, "rank": NaN}',
    '{"schema": "syncpace.trace", "schema_version": 2, "offset": Infinity}',
    '{"a": ' + "9" * 5000 + "}",
    "[" * 100_000 + "]" * 100_000,
    '{"schema": "syncpace.trace", "host": "\\ud800"}',
    "\ufeff{}",
    "[]",
    '"just a string"',
    "{not json",
]

BAD_META_BYTES = [b"\xff\xfe{}", b"\x00" * 10, b'{"host": "\xc3\x28"}']

HOSTILE = [
    "[/]",
    "[link=https://example.invalid]click[/link]",
    "\x1b[31mred\x1b[0m",
    "line\nbreak",
    "cr\rreturn",
    "bidi\u202eevil",
    "[bold]x",
    "tab\there",
]


def _files(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir())


def damages(bases: dict[str, Path]) -> st.SearchStrategy[Damage]:
    """Every kind of damage, over the files of the base traces."""
    per_base = []
    for name, root in bases.items():
        files = _files(root)
        streams = [f for f in files if f.endswith(".arrow")]
        # an always-on run's segments hold events too: rank-00003.events.000017.arrow
        events = [f for f in files if ".events." in f and f.endswith(".arrow")]
        summaries = [f for f in files if f.endswith(".summary.arrow")]
        monitors = [f for f in files if f.endswith(".monitor.jsonl")]
        steps = [f for f in files if f.endswith(".steps.arrow")]
        metas = [f for f in files if f.endswith(".meta.json")]
        b = st.just(name)
        if name != "v1":  # no checksums in version 1: a flipped value is undetectable
            per_base.append(
                st.builds(Damage, b, st.just("flip"), st.sampled_from(files),
                          st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)))
            )  # fmt: skip
        per_base += [
            st.builds(Damage, b, st.just("truncate"), st.sampled_from(files),
                      st.tuples(st.floats(0, 1))),
            st.builds(Damage, b, st.just("append"), st.sampled_from(files),
                      st.tuples(st.binary(min_size=1, max_size=64))),
            st.builds(Damage, b, st.just("batch_cut"), st.sampled_from(streams),
                      st.tuples(st.integers(0, 20), st.booleans())),
            st.builds(Damage, b, st.just("bad_value"), st.sampled_from(events),
                      st.tuples(st.sampled_from(BAD_VALUES["events"]), st.integers(0, 1000))),
            st.builds(Damage, b, st.just("bad_value"), st.sampled_from(steps),
                      st.tuples(st.sampled_from(BAD_VALUES["steps"]), st.integers(0, 1000))),
            st.builds(Damage, b, st.just("null"), st.sampled_from(streams),
                      st.tuples(st.integers(0, 20), st.integers(0, 1000))),
            st.builds(Damage, b, st.just("retype"), st.sampled_from(streams),
                      st.tuples(st.integers(0, 20), st.sampled_from(["string", "float64",
                                                                     "int32", "drop", "dup"]))),
            st.builds(Damage, b, st.just("duplicate_rows"), st.sampled_from(streams),
                      st.tuples(st.integers(0, 1000), st.integers(1, 5))),
            st.builds(Damage, b, st.just("reverse_steps"), st.sampled_from(steps)),
            st.builds(Damage, b, st.just("meta_value"), st.sampled_from(metas),
                      st.tuples(st.sampled_from(BAD_META))),
            st.builds(Damage, b, st.just("meta_text"), st.sampled_from(metas),
                      st.tuples(st.sampled_from(BAD_META_TEXT))),
            st.builds(Damage, b, st.just("meta_bytes"), st.sampled_from(metas),
                      st.tuples(st.sampled_from(BAD_META_BYTES))),
            st.builds(Damage, b, st.just("duplicate_rank_file"), st.sampled_from(metas)),
            st.builds(Damage, b, st.just("remove"), st.sampled_from(files)),
            st.builds(Damage, b, st.just("fs"), st.sampled_from(files),
                      st.tuples(st.sampled_from(["fifo", "dev_zero", "directory", "dangling",
                                                 "to_directory", "unreadable", "socket"]))),
            st.builds(Damage, b, st.just("hostile"), st.sampled_from(metas),
                      st.tuples(st.sampled_from(["host", "group", "op"]),
                                st.sampled_from(HOSTILE)), st.just(True)),
            st.builds(Damage, b, st.just("empty_trace"), st.just(""),
                      st.tuples(st.sampled_from(["no_events", "no_steps", "both", "one_step"]))),
        ]  # fmt: skip
        if summaries:
            per_base.append(
                st.builds(Damage, b, st.just("bad_value"), st.sampled_from(summaries),
                          st.tuples(st.sampled_from(BAD_VALUES["summary"]),
                                    st.integers(0, 1000)))
            )  # fmt: skip
        if monitors:
            per_base += [
                st.builds(Damage, b, st.just("monitor_line"), st.sampled_from(monitors),
                          st.tuples(st.sampled_from(BAD_DETECTIONS), st.integers(0, 20))),
            ]  # fmt: skip
    return st.one_of(per_base)


def apply(damage: Damage, root: Path) -> None:
    """Do ``damage`` to the trace copied at ``root``."""
    path = root / damage.file
    kind, p = damage.kind, damage.params
    if kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * p[0])])
    elif kind == "flip":
        data = bytearray(path.read_bytes())
        if data:
            data[p[0] % len(data)] ^= p[1]
        path.write_bytes(bytes(data))
    elif kind == "append":
        with path.open("ab") as f:
            f.write(p[0])
    elif kind == "batch_cut":
        table, batches = _read_table(path)
        keep = p[0] % (len(batches) + 1)
        sink = pa.OSFile(str(path), "wb")
        writer = pa.ipc.new_stream(sink, table.schema)
        for batch in batches[:keep]:
            writer.write_batch(batch)
        if p[1]:  # a proper end: only the declared counts can tell
            writer.close()
        sink.close()
    elif kind == "bad_value":
        (column, value), row = p
        table, _ = _read_table(path)
        if table.num_rows == 0 or column not in table.column_names:
            return
        _write_table(path, _set_value(table, column, row, value))
    elif kind == "null":
        table, _ = _read_table(path)
        if table.num_rows == 0:
            return
        column = table.column_names[p[0] % table.num_columns]
        _write_table(path, _set_value(table, column, p[1], None))
    elif kind == "retype":
        table, _ = _read_table(path)
        index = p[0] % table.num_columns
        name = table.column_names[index]
        if p[1] == "drop":
            table = table.remove_column(index)
        elif p[1] == "dup":
            table = table.append_column(name, table.column(index))
        else:
            try:
                table = table.set_column(index, name, table.column(index).cast(p[1]))
            except pa.ArrowException:
                table = table.set_column(
                    index, name, pa.array([str(v) for v in table.column(index).to_pylist()])
                )
        _write_table(path, table)
    elif kind == "duplicate_rows":
        table, _ = _read_table(path)
        if table.num_rows == 0:
            return
        row = p[0] % table.num_rows
        extra = table.slice(row, 1)
        _write_table(path, pa.concat_tables([table] + [extra] * p[1]))
    elif kind == "reverse_steps":
        table, _ = _read_table(path)
        if table.num_rows < 2:
            return
        _write_table(path, table.take(list(range(table.num_rows - 1, -1, -1))))
    elif kind == "meta_value":
        key, value = p[0]
        meta = json.loads(path.read_text())
        meta[key] = value
        path.write_text(json.dumps(meta))
    elif kind == "meta_text":
        path.write_text(p[0], encoding="utf-8", errors="surrogatepass")
    elif kind == "meta_bytes":
        path.write_bytes(p[0])
    elif kind == "duplicate_rank_file":
        rank = int(damage.file.split("-")[1].split(".")[0])
        shutil.copy(path, root / f"rank-{rank:06d}.meta.json")
    elif kind == "remove":
        path.unlink()
    elif kind == "fs":
        _oddity(path, p[0])
    elif kind == "hostile":
        _hostile(root, path, *p)
    elif kind == "empty_trace":
        _empty(root, p[0])
    elif kind == "monitor_line":
        lines = path.read_bytes().split(b"\n")
        lines.insert(p[1] % len(lines), p[0])
        path.write_bytes(b"\n".join(lines))


def _oddity(path: Path, what: str) -> None:
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dev_zero":
        path.symlink_to("/dev/zero")
    elif what == "directory":
        path.mkdir()
    elif what == "dangling":
        path.symlink_to(path.parent / "nowhere")
    elif what == "to_directory":
        path.symlink_to(path.parent)
    elif what == "unreadable":
        path.write_bytes(b"{}")
        path.chmod(0)
    elif what == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))


def _hostile(root: Path, meta_path: Path, where: str, text: str) -> None:
    if where == "host":
        meta = json.loads(meta_path.read_text())
        meta["host"] = text
        meta_path.write_text(json.dumps(meta))
        return
    stem = meta_path.name.split(".")[0]
    events = root / f"{stem}.events.arrow"
    table, _ = _read_table(events)
    if table.num_rows == 0:
        return
    column = "group" if where == "group" else "op"
    if column == "op":  # an op name outside the format is invalid, not just hostile
        text = "all_reduce"
    values = [text] * table.num_rows
    index = table.schema.get_field_index(column)
    _write_table(events, table.set_column(index, column, pa.array(values, pa.string())))


def _empty(root: Path, what: str) -> None:
    for path in root.glob("rank-*.arrow"):
        if (what in ("no_events", "both") and path.name.endswith(".events.arrow")) or (
            what in ("no_steps", "both") and path.name.endswith(".steps.arrow")
        ):
            table, _ = _read_table(path)
            _write_table(path, table.slice(0, 0))
        elif what == "one_step" and path.name.endswith(".steps.arrow"):
            table, _ = _read_table(path)
            _write_table(path, table.slice(0, 1))
    for path in root.glob("rank-*.meta.json"):  # declared counts that agree: a real empty run
        meta = json.loads(path.read_text())
        stem = path.name.split(".")[0]
        for what_, suffix in (("events", ".events.arrow"), ("steps", ".steps.arrow")):
            table, _ = _read_table(root / f"{stem}{suffix}")
            meta[f"{what_}_written"] = table.num_rows
        path.write_text(json.dumps(meta))


# Classification ----------------------------------------------------------------------
@dataclass
class Outcome:
    kind: str  # one of OUTCOMES
    detail: str = ""
    verb: str = ""
    #: For a clean outcome: "refused" (one line), "reported" (accepted, every verb says
    #: so), "unchanged" (the damage changed nothing) or "escaped" (hostile names).
    how: str = ""


def _run_cli(argv: list[str], seconds: float) -> tuple[int | str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            with alarm(seconds):
                code: int | str = main(argv)
        except SystemExit as exc:  # argparse: usage and one error line, exit 2
            code = int(exc.code or 0) if isinstance(exc.code, int) else 2
        except Hang:
            code = "hang"
        except (KeyboardInterrupt, GeneratorExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - what the fuzzer exists to find
            # (a Rust library's panic is a BaseException: it must be a case, not the end)
            code = f"traceback: {type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202e]")


def _snapshot(root: Path) -> Any:
    return _observe(load_trace(root))[0]


def _observe(trace: Any) -> tuple[Any, list[str]]:
    """What a loaded trace holds (the whole run of an always-on run too), and what the
    library says of it: the reader's warnings and those of the whole run's files."""
    whole = whole_run(trace)
    snapshot = (
        trace.world_size,
        trace.events.sort(trace.events.columns).rows(),
        trace.steps.sort(trace.steps.columns).rows(),
        {r: dict(sorted(m.items())) for r, m in trace.meta.items()},
        None if whole is None else (whole.to_json(), whole.bins.rows()),
    )
    return snapshot, [*trace.warnings, *(whole.warnings if whole is not None else ())]


def _mentions(text: str, damage: Damage, root: Path) -> bool:
    """Whether ``text`` reports the damaged file, its rank or (directory-wide damage)
    the loss itself."""
    if damage.file:
        if damage.file in text:
            return True
        segment = re.match(r"(rank-\d+\.events)\.\d+\.arrow$", damage.file)
        if segment and f"{segment.group(1)}.*.arrow" in text:  # the rank's segments, as one
            return True
        rank = re.match(r"rank-0*(\d+)", damage.file)
        if rank and re.search(rf"\brank {int(rank.group(1))}\b", text):
            return True
    return False


def run_trace_case(
    damage: Damage,
    bases: dict[str, Path],
    work: Path,
    snapshots: dict[str, Any],
    *,
    seconds: float = 20.0,
    html: bool = False,
) -> Outcome:
    root = work / "case"
    if root.exists():
        _rmtree(root)
    shutil.copytree(bases[damage.base], root, symlinks=True)
    try:
        apply(damage, root)
    except (OSError, pa.ArrowException, ValueError) as exc:
        return Outcome("clean", f"damage not applicable: {exc}", how="unchanged")
    try:
        return _classify(damage, root, work, snapshots[damage.base], seconds, html)
    finally:
        _rmtree(root)


def _rmtree(root: Path) -> None:
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if not path.is_symlink():
                path.chmod(stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)


def _classify(
    damage: Damage, root: Path, work: Path, snapshot: Any, seconds: float, html: bool
) -> Outcome:
    # 1. the library
    try:
        with alarm(seconds):
            trace = load_trace(root)
            after, said = _observe(trace)
    except Hang as exc:
        return Outcome("hang", str(exc), "load_trace")
    except SyncpaceError as exc:
        message = str(exc)
        if "\n" in message or str(root) not in message:
            return Outcome("traceback", f"refusal not one line naming the file: {message!r}")
        if damage.hostile:
            return Outcome("silent", f"a valid trace with hostile names was refused: {message}")
        return _check_cli_refusal(damage, root, work, seconds, message)
    except (KeyboardInterrupt, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a panic too
        return Outcome("traceback", f"{type(exc).__name__}: {exc}", "load_trace")
    changed = after != snapshot
    reported = any(_mentions(w, damage, root) for w in said)
    # 2. every verb, terminal and JSON
    verbs = [
        ["trace-info", str(root)],
        ["trace-info", str(root), "--json"],
        ["diagnose", str(root)],
        ["diagnose", str(root), "--json"],
        ["export", "--perfetto", str(root), "-o", str(work / "case.json"), "--force"],
    ]
    if html:
        verbs.append(["report", str(root), "-o", str(work / "case.html"), "--force"])
    outputs = []
    for argv in verbs:
        code, out, err = _run_cli(argv, seconds)
        if code == "hang":
            return Outcome("hang", " ".join(argv[:1]), argv[0])
        if isinstance(code, str):
            return Outcome("traceback", code, " ".join(argv[:3]))
        if code != 0:
            return Outcome("traceback", f"exit {code} after the library accepted: {err[-300:]}")
        if "--json" in argv:
            try:
                data = json.loads(out, parse_constant=_no_constants)
            except ValueError as exc:
                return Outcome("silent", f"{argv[0]} --json printed invalid JSON: {exc}")
            del data
        elif _RAW_CONTROL.search(out + err):
            return Outcome("silent", f"{argv[0]} printed a raw control character")
        outputs.append((argv, out + err))
    if damage.kind == "empty_trace":
        diagnose_json = json.loads(_run_cli(["diagnose", str(root), "--json"], seconds)[1])
        modes = {f["mode"] for f in diagnose_json["findings"]}
        if "healthy" in modes or "insufficient_data" not in modes:
            return Outcome("silent", f"an empty trace was judged {sorted(modes)}")
        return Outcome("clean", "insufficient data reported", how="reported")
    if damage.hostile:
        return Outcome("clean", "hostile names escaped", how="escaped")
    if not changed:
        return Outcome("clean", "no effect on the data", how="unchanged")
    if not reported:
        return Outcome("silent", f"data changed, no warning names {damage.file}")
    for argv, text in outputs:
        if argv[0] in ("trace-info", "diagnose", "export") and not _mentions(text, damage, root):
            return Outcome("silent", f"{' '.join(argv[:1])} does not report what the reader did")
    return Outcome("clean", "damage reported by every verb", how="reported")


def _check_cli_refusal(
    damage: Damage, root: Path, work: Path, seconds: float, message: str
) -> Outcome:
    code, out, err = _run_cli(["trace-info", str(root)], seconds)
    lines = err.strip().splitlines()
    if code == "hang":
        return Outcome("hang", "trace-info", "trace-info")
    if code != 2 or len(lines) != 1 or str(root) not in lines[0]:
        return Outcome("traceback", f"CLI refusal not one line (exit {code}): {err[-300:]!r}")
    if _RAW_CONTROL.search(err):
        return Outcome("silent", "the refusal printed a raw control character")
    return Outcome("clean", message, how="refused")


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} in JSON output")


# Scenario files and command lines -----------------------------------------------------
SCENARIO = EXAMPLES / "slow_node.toml"
SCENARIO_VALUES = ["nan", "inf", "-inf", "-1", "0", "1.5", "1e12", '"text"', "[]", "{}", "true",
                   "99999999999999999999999", '"\\ud800"']  # fmt: skip


@dataclass(frozen=True)
class ScenarioDamage:
    kind: str
    params: tuple

    def __str__(self) -> str:
        return f"scenario:{self.kind}:{self.params}"


def scenario_damages() -> st.SearchStrategy[ScenarioDamage]:
    lines = SCENARIO.read_text().splitlines()
    keyed = [i for i, line in enumerate(lines) if "=" in line and not line.lstrip().startswith("#")]
    return st.one_of(
        st.builds(ScenarioDamage, st.just("value"),
                  st.tuples(st.sampled_from(keyed), st.sampled_from(SCENARIO_VALUES))),
        st.builds(ScenarioDamage, st.just("truncate"), st.tuples(st.floats(0, 1))),
        st.builds(ScenarioDamage, st.just("bytes"),
                  st.tuples(st.sampled_from([b"\xff\xfe", b"\x00", b"[[[", b"= 1", b"\xc3\x28"]))),
        st.builds(ScenarioDamage, st.just("drop_line"), st.tuples(st.sampled_from(keyed))),
    )  # fmt: skip


def apply_scenario(damage: ScenarioDamage, path: Path) -> None:
    lines = SCENARIO.read_text().splitlines()
    if damage.kind == "value":
        index, value = damage.params
        key = lines[index].split("=", 1)[0]
        lines[index] = f"{key}= {value}"
        path.write_text("\n".join(lines) + "\n")
    elif damage.kind == "truncate":
        data = SCENARIO.read_bytes()
        path.write_bytes(data[: int(len(data) * damage.params[0])])
    elif damage.kind == "bytes":
        path.write_bytes(SCENARIO.read_bytes() + b"\n" + damage.params[0] + b"\n")
    elif damage.kind == "drop_line":
        del lines[damage.params[0]]
        path.write_text("\n".join(lines) + "\n")


def _json_has_nan(text: str) -> bool:
    try:
        json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return True
    return False


def run_scenario_case(damage: ScenarioDamage, work: Path, seconds: float = 30.0) -> Outcome:
    path = work / "scenario.toml"
    apply_scenario(damage, path)
    argv = ["simulate", "--scenario", str(path), "--nodes", "2", "--steps", "4", "--json"]
    return _classify_cli(argv, seconds, str(path), json_out=True)


def _classify_cli(argv: list[str], seconds: float, names: str | None, json_out: bool) -> Outcome:
    code, out, err = _run_cli(argv, seconds)
    if code == "hang":
        return Outcome("hang", " ".join(argv), argv[0])
    if isinstance(code, str):
        return Outcome("traceback", code, " ".join(argv))
    if code == 0:
        if json_out and _json_has_nan(out):
            return Outcome("silent", "exit 0 with NaN or invalid JSON", " ".join(argv))
        if _RAW_CONTROL.search(out + err):
            return Outcome("silent", "a raw control character printed", " ".join(argv))
        return Outcome("clean", "accepted", " ".join(argv), how="accepted")
    lines = [x for x in err.strip().splitlines() if x.strip()]
    usage = lines and lines[0].startswith("usage:")
    error_lines = [x for x in lines if not x.startswith("usage:") and not x.startswith(" ")]
    if code == 2 and (len(lines) == 1 or (usage and len(error_lines) == 1)):
        return Outcome("clean", lines[-1], " ".join(argv), how="refused")
    return Outcome("traceback", f"exit {code}: {err[-300:]!r}", " ".join(argv))


#: Flags of the read-only verbs and values that are bad in many ways.
CLI_VERBS = {
    "trace-info": ["--json"],
    "diagnose": ["--json", "--warmup-steps", "--link-gbps", "--critical-cost", "--min-steps",
                 "--bench", "--straggler-factor"],
    "report": ["-o", "--warmup-steps", "--comm-share"],
    "export": ["--perfetto", "-o"],
    "simulate": ["--nodes", "--steps", "--seed", "--set", "--json", "--tier", "--strategy",
                 "--max-trace-ranks", "--gpus-per-node"],
    "fabric": ["down", "status"],
}  # fmt: skip
CLI_VALUES = ["nan", "inf", "-1", "0", "", "[/]", "\x1b[2J", "1e400", "x" * 300,
              "/nonexistent/place/f", "/proc/1/mem", "/dev/zero", "--", "4,", ",,"]  # fmt: skip


@dataclass(frozen=True)
class CommandLine:
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return "cli:" + " ".join(self.argv)


#: The non-finite numbers among CLI_VALUES (refused by the settings' own finite check).
NON_FINITE = ("nan", "inf", "1e400")


def command_lines(
    trace_dir: Path, values: list[str] | None = None
) -> st.SearchStrategy[CommandLine]:
    values = CLI_VALUES if values is None else values

    def build(verb: str, flags: list[str], values: list[str], with_dir: bool) -> CommandLine:
        argv = [verb]
        if verb in ("trace-info", "diagnose", "report", "export") and with_dir:
            argv.append(str(trace_dir))
        for flag, value in zip(flags, values, strict=False):
            argv += [flag, value]
        if verb == "simulate":
            argv += ["--nodes", "2", "--steps", "3"] if "--nodes" not in argv else []
        if verb == "fabric":
            argv = ["fabric", flags[0] if flags else "down", "no-such-fabric-x"]
        return CommandLine(tuple(argv))

    return st.sampled_from(sorted(CLI_VERBS)).flatmap(
        lambda verb: st.builds(
            build,
            st.just(verb),
            st.lists(st.sampled_from(CLI_VERBS[verb]), max_size=3),
            st.lists(st.sampled_from(values), min_size=3, max_size=3),
            st.booleans(),
        )
    )


def run_command_line(case: CommandLine, work: Path, seconds: float = 30.0) -> Outcome:
    here = os.getcwd()
    os.chdir(work)  # outputs with default names land in the work directory
    try:
        return _classify_cli(list(case.argv), seconds, None, json_out="--json" in case.argv)
    finally:
        os.chdir(here)
