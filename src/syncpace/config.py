"""Configuration dataclasses: one source for defaults, environment variables and CLI flags.

Each component owns a ``@dataclass(kw_only=True, slots=True)`` whose fields are
declared with :func:`setting`. The same declaration yields the ``SYNCPACE_*``
environment variable (:func:`from_env`) and the ``--flag`` of the CLI
(:func:`add_flags` / :func:`from_flags`), so the three can never disagree.
Precedence: defaults < environment < flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from syncpace.errors import ConfigError

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def setting(default: Any, help: str) -> Any:  # noqa: A002 - mirrors argparse
    """A documented configuration field."""
    return dataclasses.field(default=default, metadata={"help": help})


def env_name(field_name: str) -> str:
    return "SYNCPACE_" + field_name.upper()


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _field_type(cls: type, field: dataclasses.Field) -> type:
    hints = {bool: bool, int: int, float: float, str: str}
    default = field.default
    if default is None or default is dataclasses.MISSING:
        annotation = str(field.type)
        for name, kind in (("bool", bool), ("int", int), ("float", float)):
            if annotation.startswith(name):
                return kind
        return str
    return hints.get(type(default), str)


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
            raise ConfigError(f"{source}: expected {kind.__name__}, got {raw!r}") from exc
    return text


def from_env(cls: type[T], environ: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build ``cls`` from defaults, then ``SYNCPACE_*`` variables, then ``overrides``."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = env_name(field.name)
        if name in environ and environ[name] != "":
            values[field.name] = parse_value(_field_type(cls, field), environ[name], name)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)


def to_env(config: Any) -> dict[str, str]:
    """The environment variables that reproduce ``config`` in a child process."""
    env = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if value is None:
            continue
        env[env_name(field.name)] = str(int(value)) if isinstance(value, bool) else str(value)
    return env


def add_flags(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """Add one ``--flag`` per field of ``cls`` (help from the field, default from env)."""
    group = parser.add_argument_group(f"{cls.__name__} (also settable as SYNCPACE_* variables)")
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        kind = _field_type(cls, field)
        origin = f"env {env_name(field.name)}; default {field.default}"
        help_text = f"{field.metadata.get('help', '')} [{origin}]"
        if kind is bool:
            group.add_argument(
                flag_name(field.name),
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            group.add_argument(
                flag_name(field.name), dest=field.name, type=str, default=None, help=help_text
            )


def from_flags(cls: type[T], namespace: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` with precedence defaults < environment < parsed flags < overrides."""
    flags: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw = getattr(namespace, field.name, None)
        if raw is None:
            continue
        kind = _field_type(cls, field)
        flags[field.name] = (
            raw if isinstance(raw, bool) else parse_value(kind, raw, flag_name(field.name))
        )
    flags.update({k: v for k, v in overrides.items() if v is not None})
    return from_env(cls, **flags)
