"""``syncpace fabric up|down|status|run``: an emulated multi-node network on this host."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rich.table import Table

from syncpace.capture.launch import armed_env, prepare_run_dir
from syncpace.cli.output import add_force_flag
from syncpace.cli.run import add_tracing_flags, command_of, tracing_from_flags
from syncpace.cli.trace_info import print_summary
from syncpace.config import field_type, flag_name, parse_value, renamed
from syncpace.console import make_console
from syncpace.errors import ConfigError, FabricError
from syncpace.fabric import lifecycle
from syncpace.fabric.backend import SystemBackend, require_root
from syncpace.fabric.counters import sample
from syncpace.fabric.faults import fault_from_table, parse_fault
from syncpace.fabric.lifecycle import existing_namespaces
from syncpace.fabric.plan import up_plan
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.fabric.spec import FabricSpec, build_spec, format_rate, load_spec_file
from syncpace.fabric.state import list_fabrics, load_state, resolve_name
from syncpace.fabric.topology import build_fabric
from syncpace.report import jsonout
from syncpace.trace.reader import load_trace
from syncpace.trace.summary import summarize

HELP_EPILOG = "Needs root. Topology, commands and files: docs/fabric.md."


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fabric",
        help="emulate a multi-node network (namespaces, bridges, shaped links) and run jobs on it",
        description="Build a star or leaf-spine network of namespaces on this host, run a "
        "multi-node job across it, inject faults, sample link counters. " + HELP_EPILOG,
    )
    sub = parser.add_subparsers(dest="fabric_verb", metavar="SUBCOMMAND", required=True)

    up = sub.add_parser("up", help="create a fabric", description="Create a fabric. " + HELP_EPILOG)
    _add_spec_flags(up)
    up.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    up.add_argument("--json", action="store_true", help="print the fabric as JSON")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="remove a fabric (idempotent)")
    down.add_argument("name", nargs="?", help="fabric name (default: the only one up)")
    down.add_argument("--all", action="store_true", help="remove every fabric with a state file")
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="hosts, links, rates and counters of a fabric")
    status.add_argument("name", nargs="?", help="fabric name (default: the only one up)")
    status.add_argument("--json", action="store_true", help="print as JSON")
    status.set_defaults(func=cmd_status)

    run = sub.add_parser(
        "run",
        help="run a command on every host of a fabric (one launcher per host)",
        description="Run COMMAND once per host namespace, with MASTER_ADDR/PORT, node rank "
        "(PET_* for torchrun) and GLOO_SOCKET_IFNAME set. Without --fabric a fabric is made "
        "from the spec flags for this run and removed after it. Example: syncpace fabric run "
        "--trace --out runs/a -- torchrun --nproc-per-node 1 train.py. " + HELP_EPILOG,
    )
    run.add_argument("--fabric", help="run on this existing fabric instead of a temporary one")
    _add_spec_flags(run)
    run.add_argument("--out", help="run directory (default: ./syncpace-run-YYYYmmdd-HHMMSS)")
    add_force_flag(run, "the trace files of an existing run directory")
    run.add_argument("--trace", action="store_true", help="trace every rank with syncpace")
    run.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="'ACTION TARGET [VALUE] [at=S] [for=S]'",
        help="inject a fault, e.g. 'flap h1-leaf0 at=3 for=2', 'flow h0->h2', "
        "'rate leaf0-spine 20mbit at=5', 'straggler h3 0.3', 'kill rank=2 at=8' (repeatable)",
    )
    run.add_argument("--timeout", type=float, default=600.0, help="kill the job after SECONDS")
    run.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="once a host fails, kill the others after SECONDS (they may wait on it)",
    )
    run.add_argument("--sample-interval", type=float, default=0.5, help="link counter period")
    run.add_argument("--master-port", type=int, default=29500, help="rendezvous port on h0")
    run.add_argument("--quiet", action="store_true", help="do not echo the hosts' output")

    add_tracing_flags(run)
    run.set_defaults(func=cmd_run)


def _add_spec_flags(parser: argparse.ArgumentParser) -> None:

    group = parser.add_argument_group("topology (flags override the --spec file)")
    group.add_argument("--spec", help="TOML file with a [fabric] table (and [[fault]] tables)")
    for field in dataclasses.fields(FabricSpec):
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=f"spec_{field.name}",
            default=None,
            help=f"{field.metadata['help']} [default {field.default}]",
        )


def _spec_from_args(args: argparse.Namespace):  # -> (FabricSpec, list[Fault])

    file_values, fault_tables = load_spec_file(args.spec) if args.spec else ({}, [])
    flags = {}
    for field in dataclasses.fields(FabricSpec):
        raw = getattr(args, f"spec_{field.name}")
        if raw is None:
            continue
        try:
            flags[field.name] = parse_value(
                field_type(FabricSpec, field), raw, flag_name(field.name)
            )
        except ConfigError as exc:
            raise FabricError(str(exc)) from exc
    faults = [fault_from_table(t, f"{args.spec}: [[fault]] {t}") for t in fault_tables]
    try:
        return build_spec(file_values, **flags), faults
    except FabricError as exc:  # a flag's value out of range: named as the flag
        raise renamed(exc, {name: flag_name(name) for name in flags}) from None


def cmd_up(args: argparse.Namespace) -> int:

    spec, _ = _spec_from_args(args)
    if args.dry_run:
        for command in up_plan(build_fabric(spec)):
            print(command)
        return 0
    require_root("syncpace fabric up")
    state = lifecycle.up(spec, SystemBackend())
    if args.json:
        print(jsonout.dumps(state.to_json()))
    else:
        _print_fabric(state.fabric)
        print(f"fabric {state.name} is up; remove it with: syncpace fabric down {state.name}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:

    require_root("syncpace fabric down")
    backend = SystemBackend()
    for name in list_fabrics() if args.all else [args.name]:
        found, removed = lifecycle.down_named(name, backend)
        if removed is None:
            print(f"fabric {found} is not up; nothing to remove" if found else "no fabric is up")
        else:
            print(f"fabric {found} is down ({len(removed)} namespaces removed)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:

    require_root("syncpace fabric status")
    state = load_state(resolve_name(args.name))
    backend = SystemBackend()
    alive = existing_namespaces(backend)
    missing = [ns for ns in state.fabric.namespaces if ns not in alive]
    rows = sample(state.fabric, backend)
    if args.json:
        data = state.to_json()
        data["missing_namespaces"] = missing
        data["links_now"] = [dataclasses.asdict(r) for r in rows]
        print(jsonout.dumps(data))
        return 0
    _print_fabric(state.fabric)
    console = make_console()
    table = Table(
        "link", "direction", "rate", "bytes", "packets", "drops", "backlog", title="links"
    )

    for r in rows:
        rate = "-" if r.rate_bps < 0 else format_rate(r.rate_bps)
        table.add_row(
            r.link,
            f"{r.src}→{r.dst}",
            rate,
            f"{r.bytes:,}",
            f"{r.packets:,}",
            str(r.drops),
            str(r.backlog_bytes),
        )
    console.print(table)
    if missing or not state.complete:
        console.print(
            f"[red]incomplete:[/] missing namespaces {missing}; "
            f"remove it with: syncpace fabric down {state.name}"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:

    command = command_of(args, "syncpace fabric run [options] -- COMMAND [ARGS…]")
    spec, faults = _spec_from_args(args)
    faults += [parse_fault(text) for text in args.fault]
    # Bad tracer or pacing values fail before anything is created (even without --trace).
    tracing = tracing_from_flags(args)
    if not args.trace:
        tracing = None
    require_root("syncpace fabric run")
    run_dir = prepare_run_dir(args.out, args.force)
    env = armed_env(run_dir, tracing) if tracing is not None else None
    backend = SystemBackend()
    options = RunOptions(
        timeout_s=args.timeout,
        grace_s=args.grace,
        sample_interval_s=args.sample_interval,
        master_port=args.master_port,
        faults=faults,
    )
    temporary = args.fabric is None
    state = lifecycle.up(spec, backend) if temporary else load_state(args.fabric)
    try:
        result = run_job(
            state, command, run_dir, backend, options, env, None if args.quiet else sys.stdout
        )
    finally:
        if temporary:
            lifecycle.down(state, backend)
    codes = " ".join(f"{h}:{'killed' if c is None else c}" for h, c in result.returncodes.items())
    print(
        f"syncpace fabric run: {result.reason} after {result.elapsed_s:.1f} s ({codes}); "
        f"run directory {run_dir}",
        file=sys.stderr,
    )
    if args.trace and any(Path(run_dir).glob("rank-*.meta.json")):
        if not args.quiet:
            print_summary(summarize(load_trace(run_dir)))
    return result.returncode


def _print_fabric(fabric) -> None:  # Fabric

    console = make_console()
    tcp = f", TCP {fabric.congestion_control}" if fabric.congestion_control else ""
    hosts = Table("host", "namespace", "address", "switch", title=f"fabric {fabric.name}{tcp}")
    for h in fabric.hosts:
        hosts.add_row(h.name, h.namespace, f"{h.address}/{fabric.prefixlen}", h.leaf)
    console.print(hosts)
    links = Table("link", "ends", "rate (each direction)", "kind")
    for link in fabric.links:
        ends = f"{link.a.namespace}:{link.a.dev} ↔ {link.b.namespace}:{link.b.dev}"
        links.add_row(link.name, ends, format_rate(link.rate_bps), link.kind)
    console.print(links)
