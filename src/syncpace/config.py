"""Configuration dataclasses: one declaration for defaults, flags, variables and ranges.

Each component owns a ``@dataclass(kw_only=True, slots=True)`` whose fields are
declared with :func:`setting`. The same declaration yields the ``--flag`` of the CLI
(:func:`add_flags` / :func:`from_flags`) and, for the settings of code that runs inside
the job, the environment variable (:func:`from_env` / :func:`to_env`), so they can
never disagree. Precedence: defaults < environment < flags.

**Who reads the environment.** Only classes that declare ``ENV_PREFIX``: the settings of
what runs inside the job's ranks, which have no command line of their own (tracer,
controller and pacer: ``SYNCPACE_``; the benchmark's ranks: ``SYNCPACE_BENCH_``). The
variable of field ``x`` is ``ENV_PREFIX + "X"``. A command's own settings (``demo``,
``simulate``, ``validate``, ``diagnose``'s thresholds, …) come from its flags only, so a
variable set for one command is never read by another; ``tests/test_settings.py``
checks that no variable names two settings.

**Numbers.** Every ``int`` and ``float`` field (and every element of a tuple of them) is
checked by :func:`check_numbers`, called first in its class's ``__post_init__`` with
the closed or open interval of each: NaN, infinities and values outside the interval
are refused. The error names the field; :func:`from_flags`, :func:`from_env` and the
scenario loader rename it to the flag, variable or file key the value came from.

**TOML.** :func:`load_toml` is the one reader of TOML files (``tomllib``, or ``tomli``
on Python 3.10, where it is a declared dependency).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import numbers
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from syncpace.errors import ConfigError, SyncpaceError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, published as tomli
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: Largest configuration file read (scenario, fabric spec): a settings file, not data.
MAX_FILE_BYTES = 4 << 20


def setting(default: Any, help: str) -> Any:  # noqa: A002 - mirrors argparse
    """A documented configuration field."""
    return dataclasses.field(default=default, metadata={"help": help})


def env_prefix(cls: type) -> str | None:
    """The prefix of ``cls``'s variables, or ``None``: it does not read the environment."""
    return getattr(cls, "ENV_PREFIX", None)


def env_name(cls: type, field_name: str) -> str:
    prefix = env_prefix(cls)
    if prefix is None:
        raise TypeError(f"{cls.__name__} is not read from the environment (no ENV_PREFIX)")
    return prefix + field_name.upper()


#: Fields whose flag is spelt otherwise, so that every verb names one thing one way
#: (``--force`` replaces what a verb would otherwise overwrite); the field's own name
#: stays accepted as a hidden alias, so earlier command lines still work.
RENAMED_FLAGS = {
    "overwrite": "force",
    "oversub": "oversubscription",
    "redop": "reduce_op",
}


def flag_name(field_name: str) -> str:
    return "--" + RENAMED_FLAGS.get(field_name, field_name).replace("_", "-")


def old_flag_names(field_name: str) -> tuple[str, ...]:
    """The earlier spellings of a renamed field's flag (hidden from ``--help``)."""
    return ("--" + field_name.replace("_", "-"),) if field_name in RENAMED_FLAGS else ()


def field_type(cls: type, field: dataclasses.Field) -> type:
    """The type a text value of ``field`` is parsed as: its default's, else its
    annotation's (bool, int, float; str otherwise)."""
    hints = {bool: bool, int: int, float: float, str: str}
    default = field.default
    if default is None or default is dataclasses.MISSING:
        annotation = str(field.type)
        for name, kind in (("bool", bool), ("int", int), ("float", float)):
            if annotation.startswith(name):
                return kind
        return str
    return hints.get(type(default), str)


def number_kind(field: dataclasses.Field) -> tuple[type, bool] | None:
    """``(int or float, is a tuple)`` for a numeric field, ``None`` for any other."""
    annotation = str(field.type).replace(" ", "")
    for kind in (int, float):
        name = kind.__name__
        if annotation in (name, f"{name}|None", f"None|{name}", f"Optional[{name}]"):
            return kind, False
        if annotation.startswith(f"tuple[{name},"):
            return kind, True
    return None


# Numbers ------------------------------------------------------------------------------
_INTERVAL = re.compile(r"^\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*$")


@dataclasses.dataclass(frozen=True)
class Interval:
    """A finite interval in the usual notation: ``[0, 1)``, ``(0, 3600]``."""

    text: str
    lo: float
    hi: float
    lo_open: bool
    hi_open: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        m = _INTERVAL.match(text)
        if m is None:
            raise ValueError(f"not an interval: {text!r} (write e.g. '[0, 1)')")
        lo, hi = float(m[2]), float(m[3])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"interval {text!r}: bounds must be finite and ordered")
        return cls(text.strip(), lo, hi, m[1] == "(", m[4] == ")")

    def __contains__(self, value: float) -> bool:
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below


def _number_problem(value: Any, kind: type, interval: Interval) -> str | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"must be a number, got {value!r}"
    if kind is int and not isinstance(value, numbers.Integral):
        return f"must be an integer, got {value!r}"
    if not math.isfinite(value):
        return f"must be a finite number in {interval.text}, got {value!r}"
    if value not in interval:
        return f"must be in {interval.text}, got {value!r}"
    return None


def setting_error(error: type[SyncpaceError], name: str, problem: str) -> SyncpaceError:
    """``error("name: problem")`` that remembers which setting it is about, so a caller
    that knows where the value came from can name the flag, variable or file key."""
    exc = error(f"{name}: {problem}")
    exc.setting = name  # type: ignore[attr-defined]
    exc.problem = problem  # type: ignore[attr-defined]
    return exc


#: The intervals each class declared (filled as instances are checked): what tests and
#: documentation read to know every number's range.
INTERVALS: dict[type, dict[str, Interval]] = {}


@functools.lru_cache(maxsize=1024)
def _interval(text: str) -> Interval:
    return Interval.parse(text)


def declared_intervals(cls: type) -> dict[str, Interval]:
    """The interval of every numeric setting of ``cls`` (a default instance is built)."""
    if cls not in INTERVALS:
        cls()
    return INTERVALS.get(cls, {})


def check_numbers(config: Any, error: type[SyncpaceError] = ConfigError, **intervals: str) -> None:
    """Refuse any numeric field of ``config`` that is not finite and inside its interval.

    Every ``int``/``float`` field (and tuple of them) must have an interval here: a new
    numeric setting without one is a programming error (``TypeError``), so no number
    escapes the check. ``None`` (an unset optional setting) passes.
    """
    numeric = {}
    for field in dataclasses.fields(config):
        kind = number_kind(field)
        if kind is not None:
            numeric[field.name] = kind
    missing = sorted(set(numeric) - set(intervals))
    extra = sorted(set(intervals) - set(numeric))
    if missing or extra:
        raise TypeError(
            f"{type(config).__name__}: numeric settings without an interval {missing}, "
            f"intervals of no numeric setting {extra}"
        )
    parsed = {name: _interval(text) for name, text in intervals.items()}
    INTERVALS.setdefault(type(config), parsed)
    for name, (kind, many) in numeric.items():
        interval = parsed[name]
        value = getattr(config, name)
        for item in value if many and isinstance(value, (tuple, list)) else (value,):
            if item is None:
                continue
            problem = _number_problem(item, kind, interval)
            if problem is not None:
                raise setting_error(error, name, problem)


def check_choice(
    config: Any, name: str, choices: tuple[str, ...], error: type[SyncpaceError] = ConfigError
) -> None:
    """Refuse a text setting that is not one of ``choices`` (named like a number's)."""
    value = getattr(config, name)
    if value not in choices:
        raise setting_error(error, name, f"must be one of {', '.join(choices)}, got {value!r}")


def renamed(exc: SyncpaceError, sources: Mapping[str, str]) -> SyncpaceError:
    """``exc`` with its setting named as ``sources`` says (flag, variable, file key)."""
    name = getattr(exc, "setting", None)
    if name is None or name not in sources:
        return exc
    return setting_error(type(exc), sources[name], exc.problem)  # type: ignore[attr-defined]


def build(cls: type[T], values: Mapping[str, Any], sources: Mapping[str, str]) -> T:
    """``cls(**values)``; an invalid value is named as ``sources`` says."""
    try:
        return cls(**values)
    except SyncpaceError as exc:
        raise renamed(exc, sources) from None


# Text → value -------------------------------------------------------------------------
def parse_value(kind: type, raw: str, source: str) -> Any:
    """Parse ``raw`` as ``kind``; ``source`` names where the text came from."""
    text = raw.strip()
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"{source}: expected a boolean (1/0, true/false), got {raw!r}")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError as exc:
            shown = raw if len(raw) <= 40 else raw[:37] + "..."
            raise ConfigError(f"{source}: expected {kind.__name__}, got {shown!r}") from exc
    return text


def _env_values(cls: type, environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = env_name(cls, field.name)
        if environ.get(name, "") != "":
            values[field.name] = parse_value(field_type(cls, field), environ[name], name)
            sources[field.name] = name
    return values, sources


def from_env(cls: type[T], environ: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build ``cls`` from defaults, then its variables, then ``overrides``."""
    values, sources = _env_values(cls, os.environ if environ is None else environ)
    given = {k: v for k, v in overrides.items() if v is not None}
    values.update(given)
    return build(cls, values, {k: v for k, v in sources.items() if k not in given})


def to_env(config: Any) -> dict[str, str]:
    """The environment variables that reproduce ``config`` in a child process."""
    env = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if value is None:
            continue
        name = env_name(type(config), field.name)
        env[name] = str(int(value)) if isinstance(value, bool) else str(value)
    return env


def add_flags(
    parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (), title: str = ""
) -> None:
    """Add one ``--flag`` per field of ``cls`` (help from the field), grouped in
    ``--help`` under ``title`` (what the user does with them) or else the class's
    ``HELP_TITLE``; a renamed field also answers to its old flag, unlisted."""
    prefix = env_prefix(cls)
    title = title or getattr(cls, "HELP_TITLE", "") or "options"
    group = parser.add_argument_group(title + (f" (also {prefix}* variables)" if prefix else ""))
    intervals = declared_intervals(cls)
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        kind = field_type(cls, field)
        origin = f"default {field.default}"
        if field.name in intervals:
            origin += f", in {intervals[field.name].text}"
        if prefix:
            origin = f"env {env_name(cls, field.name)}; {origin}"
        # argparse formats help with %: a literal one ("5% in mean") must be doubled
        help_text = f"{field.metadata.get('help', '')} [{origin}]".replace("%", "%%")
        if kind is bool:
            group.add_argument(
                flag_name(field.name),
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
            for old in old_flag_names(field.name):
                group.add_argument(
                    old, dest=field.name, action="store_const", const=True, help=argparse.SUPPRESS
                )
        else:
            group.add_argument(
                flag_name(field.name), dest=field.name, type=str, default=None, help=help_text
            )
            for old in old_flag_names(field.name):
                group.add_argument(old, dest=field.name, type=str, help=argparse.SUPPRESS)


def from_flags(cls: type[T], namespace: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` with precedence defaults < environment (only for a class with an
    ``ENV_PREFIX``) < parsed flags < overrides."""
    values, sources = _env_values(cls, os.environ) if env_prefix(cls) else ({}, {})
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw = getattr(namespace, field.name, None)
        if raw is None:
            continue
        flag = flag_name(field.name)
        kind = field_type(cls, field)
        values[field.name] = raw if isinstance(raw, bool) else parse_value(kind, raw, flag)
        sources[field.name] = flag
    given = {k: v for k, v in overrides.items() if v is not None}
    values.update(given)
    return build(cls, values, {k: v for k, v in sources.items() if k not in given})


# Files --------------------------------------------------------------------------------
def read_text(path: str | Path, error: type[SyncpaceError] = ConfigError) -> str:
    """A settings file's text: a regular file (never a FIFO or a device), at most
    :data:`MAX_FILE_BYTES`, UTF-8; anything else is ``error`` naming the file."""
    p = Path(path)
    try:
        info = p.stat()
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{p}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise error(f"{p}: {info.st_size:,} bytes; a settings file is at most {MAX_FILE_BYTES:,}")
    try:
        data = p.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc})") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x})") from None


def parse_toml(text: str, source: str, error: type[SyncpaceError] = ConfigError) -> dict:
    """The table of TOML ``text``; ``source`` names it in errors."""
    if tomllib is None:
        raise error(f"{source}: reading TOML on Python 3.10 needs tomli (pip install tomli)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{source}: not valid TOML ({exc})") from None
    except RecursionError:
        raise error(f"{source}: not valid TOML (nested too deeply)") from None


def load_toml(path: str | Path, error: type[SyncpaceError] = ConfigError) -> dict:
    """Read and parse a TOML settings file (see :func:`read_text`)."""
    return parse_toml(read_text(path, error), str(path), error)


def toml_value(raw: str) -> Any:
    """``raw`` as a TOML value (number, string, array, boolean); a bare word is a string."""
    if tomllib is None:
        raise ConfigError("reading TOML values on Python 3.10 needs tomli (pip install tomli)")
    try:
        return tomllib.loads(f"v = {raw.strip()}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        return raw.strip()
