"""The lab's progress lines on standard output, as every command says them."""

from __future__ import annotations

import os
import sys
import threading

# Scenarios run side by side are threads of one process, each saying its lines: print writes a
# message and its newline as two writes, between which another thread's line can land.
_writing = threading.Lock()


def say(message: str) -> None:
    """Write ``message`` and its newline in one write, whole, and flush it (a line said by
    another thread at the same time comes before or after it, never inside it). A reader that
    went away (``chaoslab run ... | head``) silences the lines, not the lab: a failed write in
    the middle of stopping what a run started would leave its servers running."""
    line = f"{message}\n"
    with _writing:
        out = sys.stdout  # looked up at each line: a test or a notebook may have replaced it
        try:
            out.write(line)
            out.flush()
        except BrokenPipeError:
            _to_devnull(out)


def _to_devnull(out: object) -> None:
    """Point the closed stream's descriptor at /dev/null: later lines, and the interpreter's
    own flush at exit, go nowhere instead of raising again (Python's documented remedy)."""
    fileno = getattr(out, "fileno", None)
    if fileno is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fileno())
    finally:
        os.close(devnull)
