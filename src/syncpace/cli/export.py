"""``syncpace export --perfetto RUN_DIR -o trace.json``: open a trace in Perfetto."""

from __future__ import annotations

import argparse

from syncpace.cli.trace_info import print_completeness
from syncpace.console import make_console, visible
from syncpace.report.perfetto import export_perfetto
from syncpace.trace.reader import read_metadata


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a trace for other tools (Perfetto / chrome://tracing)",
        description="Convert a run directory to a Chrome trace JSON file: one track per "
        "rank, iterations and collectives as slices. Open it at ui.perfetto.dev. The "
        "trace is streamed: memory stays bounded whatever its size.",
    )
    parser.add_argument("dir", metavar="RUN_DIR", help="run directory")
    parser.add_argument(
        "--perfetto", action="store_true", required=True, help="Chrome/Perfetto trace JSON"
    )
    parser.add_argument("-o", "--output", default="trace.json", help="file to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    index = read_metadata(args.dir)  # bad metadata fails before the output is created
    result = export_perfetto(index.path, args.output)
    console = make_console(stderr=True)
    lines = result.lines(index.world_size, index.missing_ranks)
    print_completeness(lines, list(result.warnings), console)
    print(f"wrote {visible(result.path)} ({result.events:,} collectives, {result.steps:,} steps)")
    return 0
