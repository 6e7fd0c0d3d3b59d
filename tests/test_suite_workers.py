"""How many workers the suite runs on (``-n auto``: tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

import conftest


@pytest.mark.parametrize(("idle", "workers"), [(0.3, 0), (1.7, 0), (1.8, 2), (2.0, 2), (16, 4)])
def test_one_worker_per_idle_core_none_below_two(monkeypatch, idle, workers):
    monkeypatch.delenv(conftest.WORKERS_ENV, raising=False)
    monkeypatch.setattr(conftest, "idle_cores", lambda: idle)
    assert conftest.pytest_xdist_auto_num_workers(None) == workers


def test_the_environment_sets_the_workers(monkeypatch):
    monkeypatch.setattr(conftest, "idle_cores", lambda: 16.0)
    monkeypatch.setenv(conftest.WORKERS_ENV, "0")
    assert conftest.pytest_xdist_auto_num_workers(None) == 0
    monkeypatch.setenv(conftest.WORKERS_ENV, "3")
    assert conftest.pytest_xdist_auto_num_workers(None) == 3


def test_idle_cores_are_between_none_and_the_cores_this_process_may_use():
    idle = conftest.idle_cores(0.05)
    assert 0.0 <= idle <= len(os.sched_getaffinity(0))
