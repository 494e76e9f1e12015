"""The lab's progress lines on standard output, as every command says them."""

from __future__ import annotations

import sys
import threading

# Scenarios run side by side are threads of one process, each saying its lines: print writes a
# message and its newline as two writes, between which another thread's line can land.
_writing = threading.Lock()


def say(message: str) -> None:
    """Write ``message`` and its newline in one write, whole, and flush it (a line said by
    another thread at the same time comes before or after it, never inside it)."""
    line = f"{message}\n"
    with _writing:
        out = sys.stdout  # looked up at each line: a test or a notebook may have replaced it
        out.write(line)
        out.flush()
