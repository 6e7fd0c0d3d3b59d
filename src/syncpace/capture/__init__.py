"""What runs inside each rank of a traced job: hooks, timing, clocks, the launcher.

Nothing here may raise into the training job; everything it records goes through
:mod:`syncpace.trace` (the format) and pacing decisions come from
:mod:`syncpace.control`.
"""
