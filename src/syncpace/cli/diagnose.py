"""``syncpace diagnose RUN_DIR [RUN_DIR...] [--json] [--what-if]``: what limits this job,
what each cause costs, and what to do."""

from __future__ import annotations

import argparse
import dataclasses
import json

from syncpace.analysis import Analysis, Thresholds, analyze
from syncpace.bench.results import load_bench, main_fit
from syncpace.config import add_flags, from_flags
from syncpace.control import Pacer, PacingConfig
from syncpace.errors import ConfigError
from syncpace.importers.flight_recorder import is_dump_dir, load_flight_recorder
from syncpace.report.terminal import print_analysis, print_what_if


def add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """Run directories, warm-up and every threshold: shared by diagnose and report."""
    parser.add_argument(
        "dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories; the directories of one job (one per node) are read as that "
        "job; several runs of one world size are compared side by side (the first is the "
        "baseline), runs of different world sizes form a scaling curve",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=1,
        help="iterations left out at the start (setup, first-call costs) [default 1]",
    )
    parser.add_argument(
        "--bench",
        metavar="PATH",
        help="a syncpace bench result (bench.json or its run directory) from the same "
        "fabric: its all-reduce bus bandwidth becomes --link-gbps unless that is given, "
        "so contention that lasts the whole run is measured against the link, not the run",
    )
    add_flags(parser, Thresholds)


def link_rate_of(bench: str) -> float:
    """The bus bandwidth (GB/s) of a ``syncpace bench`` result's main fit."""
    return link_of(bench)[1]


def link_of(bench: str) -> tuple[float, float]:
    """(latency in us, bus bandwidth in GB/s) of a ``syncpace bench`` result's main fit."""

    _, fit = main_fit(load_bench(bench)) or ("", {})
    beta = fit.get("beta_gbps")
    if not isinstance(beta, (int, float)) or not 0 < beta < float("inf"):
        raise ConfigError(f"{bench}: the benchmark has no bus bandwidth fit to use as link rate")
    alpha = fit.get("alpha_us")
    return (float(alpha) if isinstance(alpha, (int, float)) and alpha >= 0 else 0.0), float(beta)


def live_pacer(world_size: int) -> Pacer:
    """The pacer the live controller runs (policy, lag, A/B guard), with its default
    settings: the replay's what-if runs it."""
    return Pacer(PacingConfig(), world_size)


def analysis_from_args(args: argparse.Namespace) -> Analysis:
    if args.warmup_steps < 0:
        raise ConfigError(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    thresholds = from_flags(Thresholds, args)
    if args.bench and thresholds.link_gbps == 0:
        alpha, beta = link_of(args.bench)
        alpha = thresholds.link_alpha_us or alpha
        thresholds = dataclasses.replace(thresholds, link_gbps=beta, link_alpha_us=alpha)
    # Flight Recorder dump directories are read as runs too (the same hang finding).
    runs = [load_flight_recorder([d]) if is_dump_dir(d) else d for d in args.dirs]
    return analyze(runs, thresholds, warmup_steps=args.warmup_steps, pacer=live_pacer)


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
        "--json", action="store_true", help='print {"findings": [...], "metrics": {...}} as JSON'
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
        print(json.dumps(analysis.to_json(), indent=2, default=str))
        return 0
    print_analysis(analysis)
    if args.what_if:
        print_what_if(analysis)
    return 0
