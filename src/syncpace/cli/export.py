"""``syncpace export --perfetto RUN_DIR -o trace.json``: open a trace in Perfetto."""

from __future__ import annotations

import argparse

from syncpace.errors import SyncpaceError
from syncpace.report.perfetto import write_perfetto
from syncpace.trace.merge import load_job


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a trace for other tools (Perfetto / chrome://tracing)",
        description="Convert a run directory to a Chrome trace JSON file: one track per "
        "rank, iterations and collectives as slices. Open it at ui.perfetto.dev.",
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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    trace = load_job(args.dirs)
    try:
        path = write_perfetto(trace, args.output)
    except OSError as exc:
        raise SyncpaceError(f"{args.output}: cannot write ({exc.strerror or exc})") from exc
    print(f"wrote {path}")
    return 0
