"""The tracer's one logger, and its log-once rule: a failing hook must not flood a job."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("syncpace")

_warned: set[str] = set()


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log ``message`` the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        log.warning("syncpace: " + message, *args)
