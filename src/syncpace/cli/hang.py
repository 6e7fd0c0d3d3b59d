"""``syncpace hang DIR [DIR...]``: which rank, which collective, and why — in seconds.

Reads the stall records and whatever the ranks have flushed, also while the job is still
hung, or Flight Recorder dumps. Exit code 1 when the job hangs or its ranks disagree,
0 when it does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses

from syncpace.analysis import Thresholds, find_hang
from syncpace.config import add_flags, from_flags
from syncpace.console import make_console
from syncpace.errors import ConfigError
from syncpace.importers.flight_recorder import load_run
from syncpace.report import jsonout
from syncpace.report.hang import hang_json, print_hang

_NOT_HANG = tuple(f.name for f in dataclasses.fields(Thresholds) if f.name != "hang_wait_s")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hang",
        help="a frozen job: which rank, which collective, and why (works while it hangs)",
        description="Say where a job stopped: for each process group the first call not "
        "every rank completed, the ranks that never entered it (their stack), the ranks "
        "that wait in it and since when, and calls that disagree. Reads syncpace run "
        "directories (several per-node directories of one job are joined) and Flight "
        "Recorder dump directories. Exit code 1 when a hang or desync is found.",
    )
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR", help="run directories or Flight Recorder dumps"
    )
    parser.add_argument("--json", action="store_true", help="print the finding as JSON")
    parser.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="world size of a job known only from Flight Recorder dumps (default: from them)",
    )
    # Of the diagnosis thresholds only the hang's own applies here.
    add_flags(parser, Thresholds, skip=_NOT_HANG, title="when a job counts as hung")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.world_size is not None and args.world_size < 1:
        raise ConfigError(f"--world-size must be >= 1, got {args.world_size}")
    thresholds = from_flags(Thresholds, args)
    trace = load_run(args.dirs, args.world_size)
    analysis, finding = find_hang(trace, thresholds)
    if args.json:
        print(jsonout.dumps(hang_json(finding, analysis)))
        return 1 if finding is not None else 0
    console = make_console()
    if finding is None:
        console.print(
            f"no hang: no process group has a call that ranks are stuck in "
            f"({trace.world_size} ranks, {analysis.stall_records} stall records)"
        )
        for note in analysis.notes:
            console.print(f"[dim]{note}[/]")
        return 0
    print_hang(finding, console)
    for warning in trace.warnings[:5]:
        console.print(f"[dim]{warning}[/]")
    return 1
