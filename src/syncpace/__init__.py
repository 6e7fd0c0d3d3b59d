"""syncpace: make scaling failures of distributed PyTorch training visible and fixable."""

from __future__ import annotations

from syncpace._version import __version__
from syncpace.errors import ConfigError, SyncpaceError, TraceError

__all__ = ["ConfigError", "SyncpaceError", "TraceError", "__version__", "attach", "step"]


def attach(out: str | None = None, **settings: object) -> None:
    """Trace every collective of this process; call before ``init_process_group``.

    ``out`` is the run directory (default ``$SYNCPACE_DIR`` or ``./syncpace-run``);
    other keyword arguments are fields of :class:`syncpace.capture.config.TraceConfig`,
    :class:`syncpace.telemetry.config.TelemetryConfig` (``host_sampler``, ``counters_*``),
    :class:`syncpace.control.config.PacingConfig` (``strategy="early"``, ``lag``, ``ab``,
    …) or :class:`syncpace.control.config.ControllerConfig`.
    """
    from syncpace.capture.tracer import attach as _attach  # lazy: the tracer pulls in torch

    _attach(out, **settings)


def step() -> None:
    """Mark an iteration boundary by hand (replaces the optimizer-step hook)."""
    from syncpace.capture.tracer import manual_step  # lazy: the tracer pulls in torch

    manual_step()
