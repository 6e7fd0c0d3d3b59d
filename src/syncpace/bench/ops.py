"""The op table: what each benchmarked op moves, how nccl-tests counts it, and how its
result is checked on data.

Inputs hold ``pattern(rank, g) = (rank + g) % 3`` at element ``g`` of the rank's input
buffer: small integers, exact in every dtype, so the reductions over up to 63 ranks
(int8) or 128 ranks (bfloat16) have exactly computable values. Buffers the op must
overwrite start at ``SENTINEL``, which no input holds, so an element the op never
wrote is counted wrong (unless the expected reduction happens to equal it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from syncpace.errors import BenchError

#: Value of output buffers before the op writes them.
SENTINEL = 7
#: Residues of the pattern: every expected value depends only on ``g % PERIOD``.
PERIOD = 3


@dataclass(frozen=True, slots=True)
class OpSpec:
    """An op as the benchmark runs it (its bus factor: :mod:`syncpace.trace.busbw`)."""

    name: str
    #: The size is split into n chunks (one per rank): all_gather, reduce_scatter, all_to_all.
    chunked: bool = False
    reduces: bool = False
    rooted: bool = False


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("all_reduce", reduces=True),
        OpSpec("all_gather", chunked=True),
        OpSpec("reduce_scatter", chunked=True, reduces=True),
        OpSpec("broadcast", rooted=True),
        OpSpec("reduce", reduces=True, rooted=True),
        OpSpec("all_to_all", chunked=True),
        OpSpec("sendrecv"),
    )
}


def resolve_ops(text: str) -> tuple[str, ...]:
    """``"all"`` or a comma/space separated list → op names in table order."""
    words = [w for w in text.replace(",", " ").split() if w]
    if not words or words == ["all"]:
        return tuple(OPS)
    unknown = [w for w in words if w not in OPS]
    if unknown:
        raise BenchError(f"unknown op {unknown[0]!r}; one of {', '.join(OPS)} or 'all'")
    return tuple(dict.fromkeys(words))


@dataclass(frozen=True, slots=True)
class Layout:
    """Element counts of one op at one size, as nccl-tests counts them."""

    size_bytes: int  # the size column: all_gather the output, reduce_scatter the input, ...
    count: int  # the count column: elements per rank chunk for chunked ops, else the buffer
    in_numel: int
    out_numel: int


def layout(op: str, size_bytes: int, n: int, elsize: int) -> Layout | None:
    """The buffers of ``op`` at nominal ``size_bytes``; ``None`` when it rounds to nothing."""
    if OPS[op].chunked:
        chunk = size_bytes // (elsize * n)
        if chunk == 0:
            return None
        total = chunk * n
        in_numel = chunk if op == "all_gather" else total
        out_numel = chunk if op == "reduce_scatter" else total
        return Layout(total * elsize, chunk, in_numel, out_numel)
    count = size_bytes // elsize
    if count == 0:
        return None
    return Layout(count * elsize, count, count, count)


# Data ------------------------------------------------------------------------------
def pattern(torch: Any, rank: int, numel: int, start: int = 0) -> Any:
    """``(rank + g) % 3`` for ``g`` in ``start .. start+numel`` (int64)."""
    return (torch.arange(start, start + numel, dtype=torch.int64) + rank) % PERIOD


def reduced_table(n: int, redop: str) -> list[int]:
    """Reduction over ranks of the pattern, per residue ``g % 3``."""
    table = []
    for residue in range(PERIOD):
        values = [(r + residue) % PERIOD for r in range(n)]
        table.append({"sum": sum, "min": min, "max": max}[redop](values))
    return table


@dataclass(slots=True)
class Buffers:
    input: Any
    output: Any


def make_buffers(
    torch: Any,
    op: str,
    lay: Layout,
    rank: int,
    n: int,
    root: int,
    dtype: Any,
    device: Any,
    inplace: bool,
) -> Buffers:
    """Allocate and fill ``op``'s buffers on this rank.

    In place means what nccl-tests means: the input is the rank's slice of the output
    (all_gather) or the output is the rank's slice of the input (reduce_scatter).
    all_reduce, broadcast and reduce are in place by nature in torch; all_to_all and
    sendrecv have no in-place form on gloo and ignore the setting.
    """

    def filled(numel: int, start: int = 0, who: int = rank) -> Any:
        return pattern(torch, who, numel, start).to(dtype=dtype, device=device)

    def blank(numel: int) -> Any:
        return torch.full((numel,), SENTINEL, dtype=dtype, device=device)

    if op in ("all_reduce", "reduce"):
        buf = filled(lay.in_numel)
        return Buffers(buf, buf)
    if op == "broadcast":
        buf = filled(lay.in_numel) if rank == root else blank(lay.in_numel)
        return Buffers(buf, buf)
    if op == "all_gather":
        out = blank(lay.out_numel)
        if inplace:
            view = out[rank * lay.count : (rank + 1) * lay.count]
            view.copy_(filled(lay.count))
            return Buffers(view, out)
        return Buffers(filled(lay.in_numel), out)
    if op == "reduce_scatter":
        inp = filled(lay.in_numel)
        if inplace:
            return Buffers(inp, inp[rank * lay.count : (rank + 1) * lay.count])
        return Buffers(inp, blank(lay.out_numel))
    # all_to_all, sendrecv
    return Buffers(filled(lay.in_numel), blank(lay.out_numel))


def run_op(dist: Any, op: str, bufs: Buffers, rank: int, n: int, root: int, redop: str) -> None:
    """Issue ``op`` once and wait for it."""
    red = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[redop]
    # the *_single names replace the *_into_tensor / *_tensor ones in newer torch
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        dist.all_reduce(bufs.output, op=red)
    elif op == "all_gather":
        gather(bufs.output, bufs.input)
    elif op == "reduce_scatter":
        scatter(bufs.output, bufs.input, op=red)
    elif op == "broadcast":
        dist.broadcast(bufs.output, src=root)
    elif op == "reduce":
        dist.reduce(bufs.output, dst=root, op=red)
    elif op == "all_to_all":
        dist.all_to_all_single(bufs.output, bufs.input)
    elif op == "sendrecv":
        works = [
            dist.isend(bufs.input, (rank + 1) % n),
            dist.irecv(bufs.output, (rank - 1) % n),
        ]
        for work in works:
            work.wait()
    else:  # pragma: no cover - resolve_ops admits only the table
        raise BenchError(f"unknown op {op!r}")


def expected_output(
    torch: Any, op: str, lay: Layout, rank: int, n: int, root: int, redop: str
) -> Any | None:
    """The int64 values this rank's output must hold; ``None``: nothing to check here."""
    if op in ("all_reduce", "reduce", "reduce_scatter"):
        if op == "reduce" and rank != root:
            return None  # non-root buffers of reduce are scratch
        start = rank * lay.count if op == "reduce_scatter" else 0
        table = torch.tensor(reduced_table(n, redop), dtype=torch.int64)
        g = torch.arange(start, start + lay.out_numel, dtype=torch.int64)
        return table[g % PERIOD]
    if op == "broadcast":
        return pattern(torch, root, lay.out_numel)
    if op == "all_gather":
        return torch.cat([pattern(torch, j, lay.count) for j in range(n)])
    if op == "all_to_all":
        return torch.cat([pattern(torch, j, lay.count, rank * lay.count) for j in range(n)])
    if op == "sendrecv":
        return pattern(torch, (rank - 1) % n, lay.out_numel)
    raise BenchError(f"unknown op {op!r}")  # pragma: no cover


def count_wrong(torch: Any, output: Any, expected: Any | None) -> int:
    if expected is None:
        return 0
    got = output.detach().to("cpu").to(torch.float64)
    return int((got != expected.to(torch.float64)).sum())
