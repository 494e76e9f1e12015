"""The oplog made small for a while, so that a change stream's resume point can fall out of it
(seed 003: a relay down too long comes back to ``ChangeStreamHistoryLost``).

EMULATED: SecantusDB has no ``replSetResizeOplog``; the lab's server adds one that lowers
SecantusDB's own entry cap (``harness.environment.servers.secantus_server``: ``size * 64``
entries, at 16 KiB an entry). What a client then sees - the pruned history, the error code 286
on resume - is SecantusDB's own. A real mongod refuses a size under 990 MB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pymongo import MongoClient

from harness.environment.base import BackendAbilities
from harness.faults.base import Actor, Context, Setting, Step, Timed, positive
from harness.history.events import EventKind
from harness.records import Problem

ON, OFF = "oplog-shrink", "oplog-restore"
MB = 1024 * 1024


def _resize(uri: str, size_mb: float) -> tuple[float, dict[str, Any]]:
    """Resize the oplog; its size before (megabytes) and the server's reply."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    with client:
        before = _size_mb(client)
        return before, client.admin.command({"replSetResizeOplog": 1, "size": size_mb})


def oplog_size_mb(uri: str) -> float:
    """The oplog's size as the server reports it (its capped collection's ``size``)."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    with client:
        return _size_mb(client)


def _size_mb(client: MongoClient[dict[str, Any]]) -> float:
    return float(client.local["oplog.rs"].options()["size"]) / MB


@dataclass
class _OplogActor(Actor):
    fault: OplogShrink
    context: Context
    before: float | None = None

    @property
    def about(self) -> str:
        return "the oplog"

    def take(self, step: Step) -> None:
        uri = self.context.env.mongo_uri
        if step.action == ON:
            self.before, reply = _resize(uri, self.fault.size_mb)
            self.context.record(
                EventKind.FAULT_STEP,
                self.fault,
                count=int(reply.get("pruned", 0)),
                detail=f"oplog capped at {reply.get('maxEntries')} entries, holding "
                f"{reply.get('first')}..{reply.get('last')} (replSetResizeOplog, EMULATED in "
                f"the lab's SecantusDB; its running count was {reply.get('recounted')} off)",
            )
        elif step.action == OFF:
            self.undo()
        else:
            super().take(step)

    def undo(self) -> None:
        if self.before is not None:
            _resize(self.context.env.mongo_uri, self.before)
            self.before = None


@dataclass(frozen=True)
class OplogShrink(Timed):
    """Cap the oplog at ``size_mb`` megabytes (64 entries a megabyte) for ``duration`` seconds,
    dropping its oldest entries at once and as it grows; then give it its size back (what was
    dropped stays dropped). EMULATED: see the module."""

    kind: ClassVar[str] = "oplog-shrink"
    # Not own_run_only, though only change streams read the oplog: every run's writes fill it.
    # Beside other scenarios (`--together 2`), their writes rolled the small cap past the
    # relays' running change streams again and again, not once after the kill, and far more
    # entries were lost (docs/faults.md). It needs the server to itself.
    name: str
    size_mb: float
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed

    def problems(self) -> list[Problem]:
        return (
            self.trigger_problems()
            + positive("size_mb", self.size_mb)
            + positive("duration", self.duration)
        )

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    def actor(self, context: Context) -> Actor:
        return _OplogActor(self, context)

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if backend.server_control:
            return []
        return [("", f"the {backend.name} environment did not start MongoDB: replSetResizeOplog "
                 "is emulated by the lab's own server")]  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "size_mb": 1}
