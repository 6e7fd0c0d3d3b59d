"""The read path of the trace format: every reader of a run directory's files.

One module a job, bottom to top:

* :mod:`~syncpace.trace.read.meta`: the directory and every rank's metadata
  (:func:`read_metadata`, :class:`TraceMeta`), each rank's files in order;
* :mod:`~syncpace.trace.read.rank`: the one loop over a rank's events files
  (:class:`RankEvents`): schema, checksums, the version upgrade, the row and duplicate
  rules (:mod:`~syncpace.trace.read.seen`), the rank's steps;
* :mod:`~syncpace.trace.read.account`: a rank's completeness account and warnings;
* :mod:`~syncpace.trace.read.index`: the index of a rank's record batches
  (:func:`scan_rank`);
* :mod:`~syncpace.trace.read.window`: steps read again from the index
  (:func:`read_window`, :func:`read_steps`);
* :mod:`~syncpace.trace.read.sweep`: every rank read once in lockstep, a window of
  steps at a time (:class:`Sweep`), with :mod:`~syncpace.trace.read.held` (rows held
  between windows) and :mod:`~syncpace.trace.read.encoding` (their names as codes).

The loader (:func:`syncpace.trace.reader.load_trace`), the streaming analysis and the
Perfetto export all read events through :class:`~syncpace.trace.read.rank.RankEvents`.
"""
