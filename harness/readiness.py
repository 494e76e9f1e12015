"""Waiting for a condition with a deadline, instead of sleeping and hoping."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NotReady(Exception):
    """Raised by a probe to say "not yet", with the reason as message."""


class DeadlineExceeded(Exception):
    def __init__(self, what: str, timeout: float, last_error: BaseException | None) -> None:
        reason = f": {last_error}" if last_error else ""
        super().__init__(f"{what} not ready after {timeout:.0f}s{reason}")
        self.last_error = last_error


class GaveUp(Exception):
    """``abort`` said waiting longer is pointless (e.g. the process exited)."""


def wait_for(
    probe: Callable[[], T],
    *,
    what: str,
    timeout: float,
    interval: float = 0.05,
    abort: Callable[[], str | None] | None = None,
    most: float = 0.5,
) -> T:
    """Call ``probe`` until it returns without raising; return what it returned.

    ``abort`` is checked between attempts; a non-None answer ends the wait with ``GaveUp``.
    The interval grows to at most ``most`` (0.5 s) so a slow server is not hammered.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            return probe()
        except Exception as exc:
            last = exc
        if abort is not None and (reason := abort()) is not None:
            raise GaveUp(f"{what}: {reason}") from last
        if time.monotonic() >= deadline:
            raise DeadlineExceeded(what, timeout, last) from last
        time.sleep(interval)
        interval = min(interval * 1.5, most)


def accepts_connections(host: str, port: int, timeout: float = 0.5) -> None:
    """Probe: raises unless something accepts a TCP connection at host:port."""
    with socket.create_connection((host, port), timeout=timeout):
        pass
