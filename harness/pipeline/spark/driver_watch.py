"""What the MongoDB driver itself does with a consumer's commands, in the history: the commands
that failed (a reset connection, a step-down's NotWritablePrimary, a failpoint's error) and the
operations it retried and got answered - a retryable write the server recognised as one it had
applied. The application sees neither: only an error the driver gives up on reaches the
variant (WRITE_FAILED). And the driver's monitor losing the server: a heartbeat that timed out
makes the driver cancel the commands in flight on that server ("operation cancelled"), so a
command can fail because of a timeout that only the monitor saw.

Through pymongo's command and heartbeat monitoring (``event_listeners``); only failures, the
answers to retried operations and the first heartbeat failure after a success are written, so a
run without faults writes nothing here.
"""

from __future__ import annotations

from pymongo import errors, monitoring

from harness.history.events import EventKind, HistoryWriter


def driver_watch(
    history: HistoryWriter,
) -> list[monitoring.CommandListener | monitoring.ServerHeartbeatListener]:
    """The listeners to pass as a MongoClient's ``event_listeners``."""
    return [DriverWatch(history), MonitorWatch(history)]


# A check the driver cancelled itself because a command had already failed on that server: not a
# second failure. pymongo's own internal class, absent from older 4.x (then nothing is skipped).
_CANCELLED: type[BaseException] | tuple[()] = getattr(errors, "_OperationCancelled", ())

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


class MonitorWatch(monitoring.ServerHeartbeatListener):
    def __init__(self, history: HistoryWriter) -> None:
        self.history = history
        self._unreachable: set[tuple[str, int | None]] = set()  # servers whose last check failed

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        self._unreachable.discard(event.connection_id)

    # One event per outage, not one per check: the monitor checks every half second while the
    # server does not answer.
    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        if event.connection_id in self._unreachable or isinstance(event.reply, _CANCELLED):
            return
        self._unreachable.add(event.connection_id)
        self.history.record(EventKind.MONGO_ERROR, detail=f"heartbeat: {event.reply}")
