"""The coordination control layer: the pacing policy and its live controller."""

from syncpace.control.policy import Decision, PacingConfig, PacingPolicy, make_policy

__all__ = ["Decision", "PacingConfig", "PacingPolicy", "make_policy"]
