"""The nccl-tests text table: same columns and units (size in B, time in µs, GB/s =
10⁹ B/s), then the iteration spread, the footer and the pair matrix summary."""

from __future__ import annotations

from syncpace.bench.results import BenchResult, PairMatrix, SizeRow

_COLUMNS = (
    f"#{'size':>11}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  "
    f"{'time':>8}  {'algbw':>7}  {'busbw':>7}  {'#wrong':>6}  "
    f"{'min':>8}  {'p50':>8}  {'p99':>8}  {'CV':>6}"
)
_UNITS = (
    f"#{'(B)':>11}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  "
    f"{'(us)':>8}  {'(GB/s)':>7}  {'(GB/s)':>7}  {'':>6}  "
    f"{'(us)':>8}  {'(us)':>8}  {'(us)':>8}  {'':>6}"
)


def _us(value: float) -> str:
    return f"{value:8.1f}" if value >= 1e4 else f"{value:8.2f}"


def _bw(value: float) -> str:
    # slow emulated links move well under 1 GB/s; keep their digits visible
    return f"{value:7.2f}" if value >= 10 else f"{value:7.4f}"


def header(
    op: str, world: int, backend: str, device: str, inplace: bool, iters: int, warmup: int
) -> list[str]:
    place = "in-place" if inplace else "out-of-place"
    return [
        "#",
        f"# {op}: {world} ranks, {backend} on {device}, {place}, "
        f"{iters} iterations after {warmup} warm-up",
        _COLUMNS,
        _UNITS,
    ]


def row(r: SizeRow) -> str:
    wrong = "N/A" if r.wrong is None else str(r.wrong)
    s = r.stats
    return (
        f"{r.size_bytes:12d}  {r.count:12d}  {r.dtype:>8}  {r.redop:>6}  {r.root:6d}  "
        f"{_us(r.time_us)}  {_bw(r.algbw_gbps)}  {_bw(r.busbw_gbps)}  {wrong:>6}  "
        f"{_us(s.min_us)}  {_us(s.p50_us)}  {_us(s.p99_us)}  {s.cv:6.3f}"
    )


def footer(rows: list[SizeRow]) -> list[str]:
    wrong = sum(r.wrong or 0 for r in rows)
    avg = sum(r.busbw_gbps for r in rows) / len(rows) if rows else 0.0
    return [
        f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {avg:.6g}",
    ]


def pair_lines(m: PairMatrix, show: int = 5) -> list[str]:
    rounds = f"{m.rounds} round" + ("s" if m.rounds != 1 else "")
    lines = [
        "#",
        f"# point-to-point pairs: {m.world_size} ranks, {rounds}"
        f"{' (one pair at a time)' if m.serial else ''}, {m.message_bytes} B messages, "
        f"median {m.median_gbps:.4g} GB/s, upper quartile {m.reference_gbps:.4g} GB/s",
    ]
    ordered = sorted(
        (
            (i, j, v)
            for i, r in enumerate(m.bandwidth_gbps)
            for j, v in enumerate(r)
            if v is not None
        ),
        key=lambda t: t[2],
    )
    for i, j, v in ordered[:show]:
        lat = m.latency_us[i][j]
        lines.append(
            f"#   slowest {i:>3} ({m.hosts[i]}) -> {j:>3} ({m.hosts[j]}): {v:.4g} GB/s, "
            f"latency {lat:.1f} us"
        )
    if m.slow:
        pairs = ", ".join(f"{p.src}->{p.dst} ({p.ratio:.0%})" for p in m.slow)
        lines.append(f"# slow pairs (< {m.slow_fraction:.0%} of the upper quartile): {pairs}")
    else:
        lines.append(f"# slow pairs (< {m.slow_fraction:.0%} of the upper quartile): none")
    if m.suspects:
        named = ", ".join(f"rank {r} ({m.hosts[r]})" for r in m.suspects)
        lines.append(f"# every pair of {named} is slow: suspect that rank's link")
    return lines


def fit_lines(result: BenchResult) -> list[str]:
    lines = ["#", "# alpha-beta fit: time = alpha + busfactor*size/beta"]
    for f in result.fits:
        beta = "inf" if f.beta_gbps == float("inf") else f"{f.beta_gbps:.4g} GB/s"
        lines.append(
            f"#   {f.op:<15} alpha {f.alpha_us:9.2f} us   beta {beta:>14}   "
            f"knee {f.knee_bytes:12.0f} B   max error {f.max_rel_error:.1%}"
        )
    return lines
