"""``syncpace diagnose RUN_DIR [RUN_DIR...] [--json] [--what-if]``: what limits this job,
what each cause costs, and what to do."""

from __future__ import annotations

import argparse

from syncpace.analysis import Analysis, Thresholds
from syncpace.config import add_flags, from_flags
from syncpace.diagnose import DiagnoseSettings, diagnose_runs
from syncpace.diagnose.settings import NESTED
from syncpace.report import jsonout
from syncpace.report.terminal import print_analysis, print_what_if


def add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """Run directories, warm-up, benchmark and every threshold: shared by diagnose and
    report (the flags of :class:`DiagnoseSettings` and of its thresholds)."""
    parser.add_argument(
        "dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories; the directories of one job (one per node) are read as that "
        "job; several runs of one world size are compared side by side (the first is the "
        "baseline), runs of different world sizes form a scaling curve",
    )
    add_flags(parser, DiagnoseSettings, skip=NESTED, title="what is analysed")
    add_flags(parser, Thresholds, title="when a finding is reported (thresholds)")


def settings_from_args(args: argparse.Namespace) -> DiagnoseSettings:
    """The settings the flags give (each bad value named as its flag)."""
    return from_flags(DiagnoseSettings, args, thresholds=from_flags(Thresholds, args))


def analysis_from_args(args: argparse.Namespace) -> Analysis:
    return diagnose_runs(args.dirs, settings_from_args(args))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="rank what limits a run: stragglers, jitter, fabric, locality, overlap, ...",
        description="Analyse one or more trace directories and print the verdict (the "
        "causes that cost most, where, how sure, what to do first, data-quality warnings), "
        "the runs side by side and the findings, ranked by severity and cost. --json prints "
        "the raw numbers.",
    )
    add_analysis_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the schema version, findings, metrics and what-if tables as JSON: "
        "durations in ms, bandwidths in GB/s (docs/report.md)",
    )
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="print the what-if table: each cause removed in a replay of the trace (and no "
        "jitter, ideal overlap, links at the best or benchmarked rate, pacing on), the "
        "iteration time it predicts, what that saves, and the replay's error",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    analysis = analysis_from_args(args)
    if args.json:
        print(jsonout.dumps(analysis.to_json()))
        return 0
    print_analysis(analysis)
    if args.what_if:
        print_what_if(analysis)
    return 0
