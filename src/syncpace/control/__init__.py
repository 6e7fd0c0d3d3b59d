"""The coordination control layer: the pacer (policy, lag, A/B guard) and its live
controller."""

from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.control.pacer import Pacer
from syncpace.control.policy import Decision, PacingPolicy

__all__ = ["ControllerConfig", "Decision", "Pacer", "PacingConfig", "PacingPolicy"]
