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
import difflib
import importlib
import re
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


class Parser(argparse.ArgumentParser):
    """argparse with a suggestion for a misspelt verb (every verb's parser is one too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        wrong = re.match(
            r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", message
        )
        if wrong:
            argument, word, listed = wrong.groups()
            choices = re.findall(r"'([^']*)'", listed)
            # a verb is a command; any other argument's choices keep argparse's words
            is_verb = any(
                isinstance(a, argparse._SubParsersAction)
                and argument in (a.metavar, a.dest, "{" + ",".join(a.choices) + "}")
                for a in self._actions
            )
            what = "no such command" if is_verb else f"{argument}: invalid choice:"
            message = f"{what} {word!r}" + _did_you_mean(word, choices)
        super().error(message)


def _did_you_mean(word: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _verb_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)verb ``argv`` names: ``fabric run`` is its own verb."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def unknown_arguments(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """One line for what the verb does not take, with the nearest option it does."""
    word = extras[0]
    if not word.startswith("-"):
        return f"{parser.prog}: unexpected argument {visible(word)!r} (see {parser.prog} --help)"
    name = word.split("=", 1)[0]
    options = [
        option
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--")
    ]
    hint = _did_you_mean(name, options) or f" (see {parser.prog} --help)"
    return f"{parser.prog}: no such option {visible(name)}{hint}"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extras = parser.parse_known_args(argv)
    if extras:  # argparse would name none of the verb, its options or the nearest one
        print(unknown_arguments(_verb_parser(parser, argv), extras), file=sys.stderr)
        return 2
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
