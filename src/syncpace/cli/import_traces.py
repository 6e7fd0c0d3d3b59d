"""``syncpace import FORMAT SRC... --out DIR``: other tools' traces as a syncpace trace."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from syncpace.cli.output import refuse_existing_trace
from syncpace.config import add_flags, from_flags
from syncpace.console import make_console
from syncpace.importers import FORMATS, ImportConfig, ImportResult, convert
from syncpace.report import jsonout

#: Inputs at least this large get a progress bar (on a terminal).
PROGRESS_BYTES = 32 << 20


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import",
        help="convert PyTorch profiler traces, Flight Recorder dumps or NCCL Inspector logs",
        description="Convert the traces a job already left behind into a syncpace run "
        "directory, so diagnose/report/export work on them: "
        + "; ".join(f"{f.name}: {f.reads}" for f in FORMATS.values())
        + ". See docs/imports.md for what each format can and cannot tell.",
    )
    parser.add_argument("format", choices=list(FORMATS), help="what the sources are")
    parser.add_argument(
        "sources", nargs="+", metavar="SRC", help="files, or directories searched for them"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="run directory to write")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_flags(parser, ImportConfig, title="how the traces are read")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = from_flags(ImportConfig, args)
    refuse_existing_trace(args.out, config.overwrite, clear=False)  # before a long read
    console = make_console(stderr=True)
    start = time.perf_counter()
    with _progress(console) as update:
        result = convert(args.format, args.sources, args.out, config=config, progress=update)
    seconds = time.perf_counter() - start
    if args.json:
        print(jsonout.dumps({**result.to_json(), "elapsed_s": round(seconds, 3)}))  # as elapsed_ms
    else:
        print_result(result, seconds)
    return 0


class _progress:
    """A rich progress bar over input bytes, shown only for big inputs on a terminal."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> Callable[[int, int], None]:
        return self._update

    def _update(self, done: int, total: int) -> None:
        if self._bar is None:
            if total < PROGRESS_BYTES or not self._console.is_terminal:
                return
            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("reading", total=total)
        # a file re-read in full (not in Kineto's layout) counts its bytes twice
        self._bar.update(self._task, completed=min(done, total))  # type: ignore[arg-type]

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_result(result: ImportResult, seconds: float, console: Console | None = None) -> None:
    console = console or make_console()
    ranks = len(result.ranks)
    console.print(
        f"[bold]{result.out_dir}[/]: {ranks} of {result.world_size} ranks from "
        f"{result.input_files} {FORMATS[result.format].reads} "
        f"({result.input_bytes / 1e6:,.1f} MB in {seconds:.1f} s)"
    )
    ops = ", ".join(f"{op} {n:,}" for op, n in result.events_per_op.items()) or "none"
    console.print(
        f"collectives: {result.events:,} ({ops}) in {len(result.groups)} group"
        f"{'s' if len(result.groups) != 1 else ''}; {result.steps} steps from "
        f"{_STEPS.get(result.step_source, result.step_source)}"
    )
    console.print("timing: " + ", ".join(f"{t} {n:,}" for t, n in result.timing.items()))
    clock = result.clock
    unc = clock["max_uncertainty_ns"]
    methods = sorted(set(clock["methods"].values()) - {"reference"})
    console.print(
        f"clocks: {', '.join(methods) or 'one rank'}; max |offset| "
        f"{clock['max_abs_offset_ns'] / 1e6:.3f} ms, max uncertainty "
        + ("unknown" if unc is None else f"{unc / 1e3:.1f} µs")
        + (f", unaligned ranks {clock['unaligned_ranks']}" if clock["unaligned_ranks"] else "")
    )
    for what in result.missing:
        console.print(f"[yellow]not in the source:[/] {what}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    console.print(f"next: syncpace diagnose {result.out_dir}")
    sys.stdout.flush()


_STEPS = {
    "spans": "ProfilerStep# spans",
    "ends": "the ends of optimizer.step()",
    "windows": "fixed time windows",
    "none": "nothing (one step)",
}
