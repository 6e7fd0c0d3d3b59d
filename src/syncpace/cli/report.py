"""``syncpace report RUN_DIR... -o report.html``: one self-contained HTML report."""

from __future__ import annotations

import argparse

from syncpace.cli.diagnose import add_analysis_arguments, analysis_from_args
from syncpace.cli.output import add_force_flag, refuse_existing
from syncpace.console import visible
from syncpace.report.html import write_html


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report (verdict, findings, plots; works offline)",
        description="Analyse trace directories and write one HTML file: the verdict first "
        "(what costs most, where, how sure, what to do), the runs side by side, one card per "
        "finding with its evidence and plots, a timeline of the slowest and a typical "
        "iteration, and the overview plots (iteration time, CDF, lateness heatmap, wait and "
        "skew, busbw vs size; the scaling curve for runs of different world sizes).",
    )
    add_analysis_arguments(parser)
    parser.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    add_force_flag(parser, "the HTML file")
    parser.add_argument(
        "--shared-plotly",
        action="store_true",
        help="write plotly.js once beside the report (plotly-<version>.min.js) instead of "
        "inlining it: reports written into one directory share the 4.8 MB bundle; each "
        "then needs that file beside it",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    refuse_existing(args.output, args.force)  # before the analysis, which takes a while
    path = write_html(analysis_from_args(args), args.output, shared_plotly=args.shared_plotly)
    print(f"wrote {visible(path)}")  # a name may hold terminal escapes
    return 0
