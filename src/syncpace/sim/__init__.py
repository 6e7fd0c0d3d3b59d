"""Synthetic traces: seeded scenarios with planted causes, written in the trace schema."""

from syncpace.sim.scenarios import SCENARIOS, Scenario, generate

__all__ = ["SCENARIOS", "Scenario", "generate"]
