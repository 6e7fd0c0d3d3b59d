from __future__ import annotations

import argparse

import pytest

from syncpace.capture.config import TraceConfig
from syncpace.config import add_flags, from_env, from_flags, to_env
from syncpace.errors import ConfigError


def test_defaults_env_then_flags():
    env = {
        "SYNCPACE_FLUSH_INTERVAL_S": "2.5",
        "SYNCPACE_STEP_HOOK": "off",
        "SYNCPACE_CLOCK_ROUNDS": "9",
    }
    config = from_env(TraceConfig, env)
    assert (config.flush_interval_s, config.step_hook, config.clock_rounds) == (2.5, False, 9)
    parser = argparse.ArgumentParser()
    add_flags(parser, TraceConfig)
    args = parser.parse_args(["--clock-rounds", "12", "--step-hook"])
    import os

    saved = dict(os.environ)
    try:
        os.environ.update(env)
        merged = from_flags(TraceConfig, args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert (merged.flush_interval_s, merged.step_hook, merged.clock_rounds) == (2.5, True, 12)


def test_round_trip_through_env():
    config = TraceConfig(dir="/x", clock_interval_s=0.0, step_hook=False)
    assert from_env(TraceConfig, to_env(config)) == config


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SYNCPACE_FLUSH_INTERVAL_S": "fast"},
            "SYNCPACE_FLUSH_INTERVAL_S: expected float, got 'fast'",
        ),
        ({"SYNCPACE_STEP_HOOK": "maybe"}, "SYNCPACE_STEP_HOOK: expected a boolean"),
        ({"SYNCPACE_CLOCK_ROUNDS": "0"}, r"SYNCPACE_CLOCK_ROUNDS: must be in \[1, 10000\], got 0"),
        ({"SYNCPACE_FLUSH_INTERVAL_S": "-1"}, r"SYNCPACE_FLUSH_INTERVAL_S: must be in \[0.01,"),
        ({"SYNCPACE_FLUSH_INTERVAL_S": "nan"}, "SYNCPACE_FLUSH_INTERVAL_S: must be a finite"),
    ],
)
def test_bad_values_are_named(env, message):
    with pytest.raises(ConfigError, match=message):
        from_env(TraceConfig, env)
