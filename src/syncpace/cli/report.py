"""``syncpace report RUN_DIR... -o report.html``: one self-contained HTML report."""

from __future__ import annotations

import argparse

from syncpace.cli.diagnose import add_analysis_arguments, analysis_from_args
from syncpace.report.html import write_html


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report (plots and findings; works offline)",
        description="Analyse trace directories and write one HTML file with the iteration "
        "timeline, lateness heatmap, wait and skew distributions, step-time CDF, busbw vs "
        "message size, the scaling curve (several runs) and the findings.",
    )
    add_analysis_arguments(parser)
    parser.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    path = write_html(analysis_from_args(args), args.output)
    print(f"wrote {path}")
    return 0
