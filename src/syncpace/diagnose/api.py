"""The entry point above the analysis: run directories and settings in, the
:class:`~syncpace.analysis.Analysis` every output of ``diagnose`` and ``report`` is
printed or drawn from.

It lives above ``analysis`` because ``analysis`` reads traces only (its layer imports
``trace`` alone): a benchmark result, the pacer and Flight Recorder dumps are other
layers' (``bench``, ``control``, ``importers``), so they are joined here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from syncpace.analysis.api import Analysis, analyze
from syncpace.analysis.replay import PacerFactory
from syncpace.analysis.thresholds import Thresholds
from syncpace.bench.results import load_bench, main_fit
from syncpace.control import Pacer, PacingConfig
from syncpace.diagnose.settings import DiagnoseSettings
from syncpace.errors import ConfigError
from syncpace.importers.flight_recorder import is_dump_dir, load_flight_recorder
from syncpace.trace.reader import Trace


def diagnose_runs(
    runs: Sequence[Trace | str | os.PathLike[str]] | Trace | str | os.PathLike[str],
    settings: DiagnoseSettings | None = None,
) -> Analysis:
    """The whole diagnosis of ``runs``: what ``syncpace diagnose`` prints and ``syncpace
    report`` draws, for the same runs and settings (``None``: the defaults, no flag).

    Each run is a ``syncpace run`` directory (several directories of one job, one per
    node, are that one job), a directory of Flight Recorder dumps (read as a run, for
    its hang finding) or a loaded :class:`~syncpace.trace.reader.Trace`. Runs of one
    world size are compared side by side, the first the baseline; runs of different
    world sizes make a scaling curve (:func:`syncpace.analysis.analyze`).

    On top of ``analyze``: the link rate and latency of ``settings.bench`` where the
    thresholds give none (read before any run, so a bad result fails first), and the
    pacer of ``settings.pacing`` replayed for every run's what-if pacing row.

    Raises :class:`~syncpace.errors.ConfigError` for no runs or a benchmark without a
    bus-bandwidth fit, :class:`~syncpace.errors.TraceError` for a run or benchmark that
    cannot be read; reads only, writes nothing."""
    settings = settings or DiagnoseSettings()
    items = [runs] if isinstance(runs, (Trace, str, os.PathLike)) else list(runs)
    if not items:
        raise ConfigError("no runs to diagnose: give at least one run directory")
    thresholds = with_bench_link(settings.thresholds, settings.bench)
    analysis = analyze(
        [_as_run(item) for item in items],
        thresholds,
        warmup_steps=settings.warmup_steps,
        pacer=pacer_factory(settings.pacing),
    )
    check_warmup(analysis, settings.warmup_steps)
    return analysis


def check_warmup(analysis: Analysis, warmup_steps: int) -> None:
    """A warm-up that leaves no iteration of a run is refused, in one line: the analysis
    would otherwise read the warm-up itself, silently. The default single warm-up
    iteration of a one-iteration run is the exception: that iteration is analysed (and
    its findings are as unsure as one iteration makes them)."""
    if warmup_steps <= 1:
        return
    for run in analysis.runs:
        steps = run.steps
        if steps.height and int(steps["step"].min()) < warmup_steps:  # type: ignore[arg-type]
            raise ConfigError(
                f"--warmup-steps {warmup_steps} leaves nothing of {run.run} to analyse: it "
                f"has {steps.height} iterations; give fewer warm-up iterations"
            )


def with_bench_link(thresholds: Thresholds, bench: str | os.PathLike[str] | None) -> Thresholds:
    """``thresholds`` with the link rate of the benchmark ``bench`` where they set none
    (``link_gbps`` 0), and its latency where they set none either; unchanged without a
    benchmark or with a link rate of their own."""
    if not bench or thresholds.link_gbps != 0:
        return thresholds
    alpha, beta = link_of(bench)
    return dataclasses.replace(
        thresholds, link_gbps=beta, link_alpha_us=thresholds.link_alpha_us or alpha
    )


def link_of(bench: str | os.PathLike[str]) -> tuple[float, float]:
    """(latency in us, bus bandwidth in GB/s) of a ``syncpace bench`` result's main fit;
    a latency that is missing or negative is 0. :class:`~syncpace.errors.ConfigError`
    without a finite positive bus bandwidth."""
    _, fit = main_fit(load_bench(bench)) or ("", {})
    beta = fit.get("beta_gbps")
    if not isinstance(beta, (int, float)) or not 0 < beta < float("inf"):
        raise ConfigError(f"{bench}: the benchmark has no bus bandwidth fit to use as link rate")
    alpha = fit.get("alpha_us")
    return (float(alpha) if isinstance(alpha, (int, float)) and alpha >= 0 else 0.0), float(beta)


def pacer_factory(config: PacingConfig) -> PacerFactory:
    """World size -> a fresh pacer with ``config``: the object the live controller runs
    (policy, lag, A/B guard), for the replay to run live."""

    def pacer(world_size: int) -> Pacer:
        return Pacer(config, world_size)

    return pacer


def _as_run(item: Trace | str | os.PathLike[str]) -> Trace | str | os.PathLike[str]:
    """A run as ``analyze`` takes it: a Flight Recorder dump directory loaded as a trace
    (it has no run directory to stream), anything else as it is."""
    if not isinstance(item, Trace) and is_dump_dir(item):
        return load_flight_recorder([item])
    return item
