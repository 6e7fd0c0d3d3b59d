"""A free TCP port on this host, for rendezvous of locally launched ranks."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS has just handed out. Another process could take it before the
    caller binds it; launchers that meet that race fail with a clear error."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
