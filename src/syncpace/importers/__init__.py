"""Readers of other tools' traces into the trace format (e.g. Flight Recorder dumps).

Importers read only :mod:`syncpace.trace` and the foundation; what they produce is a
:class:`~syncpace.trace.reader.Trace` that the analysis reads like a traced run.
"""
