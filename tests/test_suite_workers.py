"""How many workers the suite runs on (``-n auto``: tests/suiteworkers.py)."""

from __future__ import annotations

import os

import pytest

import suiteworkers


@pytest.mark.parametrize(("idle", "workers"), [(0.3, 0), (1.7, 0), (1.8, 2), (2.0, 2), (16, 4)])
def test_one_worker_per_idle_core_none_below_two(monkeypatch, idle, workers):
    monkeypatch.delenv(suiteworkers.WORKERS_ENV, raising=False)
    monkeypatch.setattr(suiteworkers, "idle_cores", lambda: idle)
    assert suiteworkers.auto_workers() == workers


def test_the_environment_sets_the_workers(monkeypatch):
    monkeypatch.setattr(suiteworkers, "idle_cores", lambda: 16.0)
    monkeypatch.setenv(suiteworkers.WORKERS_ENV, "0")
    assert suiteworkers.auto_workers() == 0
    monkeypatch.setenv(suiteworkers.WORKERS_ENV, "3")
    assert suiteworkers.auto_workers() == 3


def test_idle_cores_are_between_none_and_the_cores_this_process_may_use():
    idle = suiteworkers.idle_cores(0.05)
    assert 0.0 <= idle <= len(os.sched_getaffinity(0))
