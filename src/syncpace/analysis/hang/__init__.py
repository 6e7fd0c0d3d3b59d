"""Hangs and desyncs measured: where each process group stopped, and who it waits for.

The input (:class:`HangInput`) is every collective call each rank recorded (the trace's
events, whatever status they ended with) plus what the stall records add: the calls in
flight when a rank stalled, the last completed call per group, and the stacks of every
thread. Flight Recorder dumps arrive in the same shape
(:mod:`syncpace.importers.flight_recorder`).

For each process group the *hang point* is the first sequence number some member
entered and did not complete. Every member is then placed: it **completed** that call,
it **waits** in it (in flight, failed, timed out), it **never entered** it (and then
what it is doing: its stack, its last call, whether it died), or it left **no trace**
at all. Calls at the same (group, seq) that disagree on op, size or dtype are a
**mismatch**; sequence numbers whose iteration differs across ranks locate a skipped
call. Judgement (is it a hang, who is to blame, what to do) lives in
:mod:`syncpace.analysis.detectors.hang`; this module only measures.

A module a job:

* :mod:`.inputs`: :class:`~.inputs.HangInput`, the calls and stall records of a run.
* :mod:`.points`: what the measurement finds: each rank's place, mismatches, skipped
  calls, the hang points.
* :mod:`.stacks`: where a stack says a rank is.
* :mod:`.measure`: the measurement itself: :func:`~.measure.analyze_hang`.
"""
