"""The one exception hierarchy of syncpace.

The CLI catches :class:`SyncpaceError` and prints its message as one line; every
message names the file or the setting at fault and what to do about it.
"""

from __future__ import annotations


class SyncpaceError(Exception):
    """Base class of every error syncpace raises on purpose."""


class ConfigError(SyncpaceError):
    """A setting (flag, environment variable, spec file) is invalid."""


class TraceError(SyncpaceError):
    """A trace directory or file cannot be read as a syncpace trace."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class TraceWriteError(TraceError):
    """A trace file cannot be written (no such place, read-only, disk full)."""


class ScenarioError(ConfigError):
    """A scenario file or override cannot be turned into a simulation."""


class FabricError(SyncpaceError):
    """The emulated fabric cannot be described, built, driven or removed as asked."""


class BenchError(SyncpaceError):
    """The benchmark cannot run as asked (bad settings, a failed rank, a timeout)."""


class ChannelError(SyncpaceError):
    """The pacer's side channel failed or timed out."""


class ReportError(SyncpaceError):
    """A report or export cannot be written."""


class PlotlyMissing(ReportError, ImportError):
    """plotly (the ``[report]`` extra) is not installed; also an ``ImportError``."""
