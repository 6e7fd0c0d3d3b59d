"""``syncpace merge DIR... --out DIR``: the per-node directories of one job, as one."""

from __future__ import annotations

import argparse

from syncpace.cli.output import add_force_flag
from syncpace.console import make_console
from syncpace.trace.merge import merge_dirs


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="merge the per-node trace directories of one job into one directory",
        description="Copy every file of the trace directories that nodes of one job wrote "
        "on their own disks (rank files, host counters and facts, link counters, stall "
        "records, Flight Recorder dumps) into one run directory, after checking they are "
        "one job (the same job id, world size, and each rank once). diagnose, report and "
        "export also accept the directories directly, with the same diagnosis.",
    )
    parser.add_argument("dirs", nargs="+", metavar="RUN_DIR", help="the job's directories")
    parser.add_argument("--out", required=True, help="run directory to create")
    add_force_flag(parser, "a trace already in --out")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    merged = merge_dirs(args.dirs, args.out, overwrite=args.force)
    console = make_console()
    files = merged["files"]
    parts = ", ".join(
        f"{path}: {len(ranks)} ranks, {files[path]} files"
        for path, ranks in merged["parts"].items()
    )
    console.print(
        f"merged job {merged['job_id'] or '(no job id)'} ({merged['world_size']} ranks) "
        f"into {merged['out']} from {parts}"
    )
    return 0
