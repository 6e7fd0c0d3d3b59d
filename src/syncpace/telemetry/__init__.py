"""Host telemetry: what a traced job's hosts say about themselves while it runs.

One sampler per host (``sampler``) reads the host's network (``netstats``), CPU
(``cpustats``) and GPU (``nvml``) counters into the run directory's host files, with
the host's PCIe topology (``pcie``); ``host`` gathers the facts of where a rank runs for
its metadata. The tracer (``syncpace.capture``) starts the sampler with its settings
(``TelemetryConfig``); nothing here imports the tracer or torch (but ``host``'s device
facts, lazily), and every failure is recorded, never raised into the job.
"""

from syncpace.telemetry.config import TelemetryConfig

__all__ = ["TelemetryConfig"]
