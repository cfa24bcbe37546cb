"""Loopback ports for the servers tests start."""

from __future__ import annotations

import socket


def unused_port() -> int:
    """A loopback port nothing listens on right now (closed again before it is returned)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
