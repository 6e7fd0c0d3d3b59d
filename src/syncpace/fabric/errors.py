"""The fabric's error: bad specs, missing privileges, failed ``ip``/``tc`` commands."""

from __future__ import annotations

from syncpace.errors import SyncpaceError


class FabricError(SyncpaceError):
    """The emulated fabric cannot be described, built, driven or removed as asked."""
