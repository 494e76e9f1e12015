"""What the MongoDB driver itself does with a consumer's commands, in the history: the commands
that failed (a reset connection, a step-down's NotWritablePrimary, a failpoint's error) and the
operations it retried and got answered - a retryable write the server recognised as one it had
applied. The application sees neither: only an error the driver gives up on reaches the
variant (WRITE_FAILED).

Through pymongo's command monitoring (``event_listeners``); only failures and the answers to
retried operations are written, so a run without faults writes nothing here.
"""

from __future__ import annotations

from pymongo import monitoring

from harness.history.events import EventKind, HistoryWriter

# Operations whose failed command is remembered until they end, at most this many (an
# operation the driver gave up on never ends in a success).
_REMEMBERED = 1000


class DriverWatch(monitoring.CommandListener):
    def __init__(self, history: HistoryWriter) -> None:
        self.history = history
        self._failed: dict[int, str] = {}  # operation id -> the command that failed

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.operation_id is None:
            return
        command = self._failed.pop(event.operation_id, None)
        if command is not None:
            self.history.record(
                EventKind.MONGO_RETRIED, detail=f"{event.command_name} answered on a retry"
            )

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        failure = event.failure
        reason = failure.get("errmsg") or failure.get("$err") or str(failure)
        code = failure.get("code")
        self.history.record(
            EventKind.MONGO_ERROR,
            detail=f"{event.command_name}: {reason}" + (f" (code {code})" if code else ""),
        )
        if event.operation_id is None:
            return
        if len(self._failed) >= _REMEMBERED:
            self._failed.pop(next(iter(self._failed)))
        self._failed[event.operation_id] = event.command_name
