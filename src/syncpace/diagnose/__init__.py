"""The whole diagnosis of a job's runs, as ``syncpace diagnose`` and ``syncpace report``
make it: :func:`diagnose_runs` with its :class:`DiagnoseSettings`.

It composes what :func:`syncpace.analysis.analyze` cannot reach from its layer: the link
rate of a ``syncpace bench`` result, the live pacer replayed for the what-if table, and
Flight Recorder dump directories read as runs.
"""

from syncpace.diagnose.api import diagnose_runs, link_of, pacer_factory
from syncpace.diagnose.settings import DiagnoseSettings

__all__ = ["DiagnoseSettings", "diagnose_runs", "link_of", "pacer_factory"]
