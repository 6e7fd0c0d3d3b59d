"""``syncpace export --perfetto RUN_DIR -o trace.json``: open a trace in Perfetto."""

from __future__ import annotations

import argparse

from syncpace.cli.output import add_force_flag, refuse_existing
from syncpace.cli.trace_info import print_completeness
from syncpace.console import make_console, visible
from syncpace.report.perfetto import export_perfetto
from syncpace.trace.merge import load_job
from syncpace.trace.read.meta import read_metadata


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a trace for other tools (Perfetto / chrome://tracing)",
        description="Convert a run directory to a Chrome trace JSON file: one track per "
        "rank, iterations and collectives as slices. Open it at ui.perfetto.dev. The "
        "trace is streamed: memory stays bounded whatever its size.",
    )
    parser.add_argument(
        "dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directory (or the directories of one job, one per node)",
    )
    parser.add_argument(
        "--perfetto", action="store_true", required=True, help="Chrome/Perfetto trace JSON"
    )
    parser.add_argument("-o", "--output", default="trace.json", help="file to write")
    add_force_flag(parser, "the file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    refuse_existing(args.output, args.force)
    if len(args.dirs) == 1:
        index = read_metadata(args.dirs[0])  # bad metadata fails before the output is made
        source, world_size, missing = index.path, index.world_size, index.missing_ranks
    else:  # one job's per-node directories: read together, in memory
        trace = load_job(args.dirs)
        source, world_size, missing = trace, trace.world_size, trace.missing_ranks
    result = export_perfetto(source, args.output)
    console = make_console(stderr=True)
    lines = result.lines(world_size, missing)
    print_completeness(lines, list(result.warnings), console)
    print(f"wrote {visible(result.path)} ({result.events:,} collectives, {result.steps:,} steps)")
    return 0
