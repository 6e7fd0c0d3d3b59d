"""What NCCL would have timed, from a real gloo run's calls and completions.

No GPU here: the tests derive NCCL's kernel timeline from the collectives a syncpace-
traced gloo run made, so fixtures in other tools' formats rest on a real run's arrivals
and transfer times, with NCCL's stream semantics on top.
"""

from __future__ import annotations

import polars as pl

from syncpace.trace.reader import Trace


def nccl_kernels(trace: Trace, ops: list[str]) -> pl.DataFrame:
    """Per rank and collective: when NCCL's kernel would have started and ended.

    A communicator's kernels run one after another on its stream, so a kernel starts at
    the rank's call or at the end of the communicator's previous collective, whichever is
    later; all members' kernels end together, the run's observed service time after the
    last of them started (last call, or the previous collective's completion, to the
    last completion: the time it took once it could run).
    """
    ev = trace.events.filter(pl.col("op").is_in(ops), pl.col("status") == "completed")
    out = []
    for _, calls in ev.group_by(["group"], maintain_order=True):
        prev_end = prev_done = 0
        for _, inst in calls.sort("seq").group_by(["seq"], maintain_order=True):
            done = int(inst["exit_ns"].max())
            service = max(done - max(int(inst["enter_ns"].max()), prev_done), 1_000)
            prev_done = max(prev_done, done)
            starts = [max(int(e), prev_end) for e in inst["enter_ns"]]
            end = max(starts) + service
            prev_end = end
            out.append(inst.with_columns(k_start=pl.Series(starts), k_end=pl.lit(end)))
    return pl.concat(out) if out else ev.with_columns(k_start=pl.lit(0), k_end=pl.lit(0))
