"""Free loopback ports, picked by the kernel, so parallel environments never collide."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago on 127.0.0.1.

    All sockets are held open until every port is chosen, so the kernel cannot hand out the
    same port twice within one call.
    """
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
