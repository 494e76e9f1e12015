"""Free loopback ports for an environment's servers, that nothing else will take meanwhile.

Not the kernel's ``bind(0)``: that hands out ports of the ephemeral range, where every outgoing
connection also takes its local port - and a Kafka node binds its ports up to half a minute
after they were picked, while the lab's clients open connections by the hundred (a proxy
listener once failed to start: its port had become a client's). These come from below the
ephemeral range, at random, and are free when picked; the environment registry keeps two
environments from picking the same (``state.reserved_ports``).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Collection
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOWEST = 20000
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_ports(count: int, *, taken: Collection[int] = ()) -> list[int]:
    """``count`` distinct ports, free on 127.0.0.1 now, outside the ephemeral range and not in
    ``taken`` (the ports other environments reserved)."""
    low, high = ephemeral_range()
    pool = list(range(LOWEST, low)) if low - LOWEST > 1000 else list(range(high + 1, 65536))
    random.SystemRandom().shuffle(pool)
    chosen: list[int] = []
    for port in pool:
        if port not in taken and _free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise OSError(f"no {count} free ports on {LOOPBACK} outside the ephemeral range")
