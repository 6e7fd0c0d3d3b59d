"""``syncpace bench [OP…] -b 8 -e 128M -f 2``: nccl-tests-style collective benchmark."""

from __future__ import annotations

import argparse
import os

from syncpace.bench.config import BenchConfig
from syncpace.bench.launch import launch_local
from syncpace.bench.runner import run_rank
from syncpace.config import add_flags, flag_name, from_flags, old_flag_names
from syncpace.errors import BenchError

#: nccl-tests' short flags for the settings they share. The reduction has no short
#: flag: ``-o`` names an output file in every verb of syncpace.
SHORT: dict[str, str | None] = {
    "min_bytes": "-b",
    "max_bytes": "-e",
    "step_factor": "-f",
    "iters": "-n",
    "warmup": "-w",
    "dtype": "-d",
    "redop": None,
    "root": "-r",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark collectives like nccl-tests, map slow rank pairs, fit alpha-beta",
        description="Measure collectives over a size sweep (nccl-tests columns, #wrong "
        "checked on data), the point-to-point matrix of every rank pair, and the alpha-beta "
        "model of each op; write them with a trace into the run directory. Run it as a "
        "distributed job: torchrun --nproc-per-node 4 -m syncpace bench …, syncpace fabric "
        "run -- python -m syncpace bench …, or --nproc N local ranks. Exit code 1 when a "
        "result is wrong. Details: docs/bench.md.",
    )
    parser.add_argument(
        "op",
        nargs="*",
        help="ops to run (default: all): all_reduce all_gather "
        "reduce_scatter broadcast reduce all_to_all sendrecv",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    sweep = parser.add_argument_group("sweep (nccl-tests flags)")
    fields = BenchConfig.__dataclass_fields__
    for name, short in SHORT.items():
        sweep.add_argument(
            *([short] if short else []),
            flag_name(name),
            dest=name,
            default=None,
            help=f"{fields[name].metadata['help']} [default {fields[name].default}]",
        )
    for old in old_flag_names("redop"):
        sweep.add_argument(old, dest="redop", default=None, help=argparse.SUPPRESS)
    add_flags(parser, BenchConfig, skip=("ops", *SHORT), title="ranks, output and checks")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ops = ",".join(args.op) if args.op else None
    config = from_flags(BenchConfig, args, ops=ops)
    if os.environ.get("RANK", "").isdigit():
        return run_rank(config, json_out=args.json)
    if config.nproc:
        return launch_local(config, json_out=args.json)
    raise BenchError(
        "not inside a distributed job: use torchrun --nproc-per-node N -m syncpace bench …, "
        "syncpace fabric run -- python -m syncpace bench …, or --nproc N for local ranks"
    )
