"""Entry point of the ``syncpace`` command.

Every verb lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.
Errors syncpace raises on purpose become one line on stderr and exit code 2; so does
an operating-system error the verb did not turn into one (a read-only or missing
place, a full disk): the file and the system's reason, never a traceback. Error
lines are printed with control characters escaped.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from syncpace import __version__, allocators
from syncpace.console import visible
from syncpace.errors import SyncpaceError

#: Verb modules, in the order ``syncpace --help`` lists them.
VERBS = (
    "demo",
    "run",
    "trace_info",
    "merge",
    "import_traces",
    "diagnose",
    "hang",
    "report",
    "export",
    "fabric",
    "bench",
    "simulate",
    "validate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="syncpace",
        description="Find, explain and fix scaling failures of distributed PyTorch training.",
    )
    parser.add_argument("--version", action="version", version=f"syncpace {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:
        importlib.import_module(f"syncpace.cli.{verb}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    allocators.keep_freed_pages()  # before a verb's module loads polars or pyarrow
    parser = build_parser()
    args = parser.parse_args(argv)
    allocators.reuse_freed_memory()  # an analysis frees and takes memory all along
    try:
        return int(args.func(args) or 0)
    except SyncpaceError as exc:
        print(f"syncpace {args.verb}: error: {visible(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        reason = exc.strerror or str(exc)
        print(f"syncpace {args.verb}: error: {visible(where + reason)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"syncpace {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
