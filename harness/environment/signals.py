"""Turn SIGTERM and SIGHUP into an exception, so ``with`` blocks unwind and stop their servers.

SIGINT already raises KeyboardInterrupt; a harness killed by SIGTERM (CI cancelling a job, a
container stopping) would otherwise die without running any cleanup. Ctrl-C that lands inside
confluent-kafka's C code comes out disguised, as does SIGTERM's ``Terminated``;
``stops_unwrapped`` gives each back its name.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(SystemExit):
    """Raised in the main thread when the process receives SIGTERM or SIGHUP."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextmanager
def stop_on_termination() -> Iterator[None]:
    """While active, SIGTERM and SIGHUP raise ``Terminated`` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return
    previous = {
        sig: signal.signal(sig, _raise_terminated) for sig in (signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stops_unwrapped() -> Iterator[None]:
    """Ctrl-C or SIGTERM raised inside confluent-kafka's C code leaves as KeyboardInterrupt or
    ``Terminated``.

    When the signal arrives while the extension calls back into Python (creating a topic's
    future, logging), its exception is raised in that call and the extension returns with it
    still set, so Python raises ``SystemError`` caused by it (confluent-kafka-python#1708): the
    code that stops a run on Ctrl-C or SIGTERM would take it for a crash."""
    try:
        yield
    except SystemError as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        if isinstance(exc.__cause__, Terminated):
            raise Terminated(exc.__cause__.signum) from exc
        raise
