"""Debezium's replication slot falls behind: its connector is stopped through Connect's REST API
(Connect's maintenance stop: the task shuts down, its offsets are committed, the slot stays) for
``duration`` seconds while the application commits on; then the server writes ``wal_mb`` MB of
WAL elsewhere - another database's traffic, or a bulk job's - and checkpoints. A slot keeps
every WAL segment its consumer has not confirmed, so Debezium's slot is that far behind. The
window ends once Debezium, resumed, streams from its slot again (or can never again): Connect
starts the task and Debezium reconnects in seconds, or a minute on a loaded machine, and a
fault ``after`` this one is timed from when Debezium reads again, not from the request.

With ``keep_mb``, the server caps what a slot may keep (``max_slot_wal_keep_size``, as
deployments set it to keep a stalled consumer from filling the disk). PostgreSQL enforces the
cap at a checkpoint: a slot further behind is invalidated (``wal_status`` lost) and its WAL
removed. Debezium, resumed, reads from a slot that can no longer give changes, and what it had
not sent is lost at the source. The invalidation, and what Debezium does about it, are the
systems' own; the lab stops the connector, writes the WAL and asks for the checkpoint.

The cap is a server setting (ALTER SYSTEM, then a reload) that the lab puts in force for that
one checkpoint and takes back at once: PostgreSQL applies it at checkpoints only, and the lab's
own slot (the run's truth, ``harness.sources.truth``) is first seen past the WAL written, so the
cap takes Debezium's slot and not the truth's. Every run on the server is exposed to it: such a
scenario runs alone.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg

from harness.environment.base import BackendAbilities
from harness.faults.base import (
    END,
    Actor,
    Context,
    Setting,
    Space,
    Step,
    Timed,
    needs_cdc_source,
    positive,
)
from harness.faults.families.postgres_restart import POSTGRES_HELD
from harness.history.events import EventKind
from harness.pipeline.connect.settings import ConnectError, ConnectRest, ConnectSettings
from harness.readiness import NotReady, wait_for
from harness.records import Problem
from harness.sources import database
from harness.sources.spec import SourceKind
from harness.sources.truth import PLUGIN as TRUTH_PLUGIN

AWAIT, STOP, STOPPED = "await-slot", "stop-source", "await-source-stopped"
FILL, CAP, RESUME = "fill-wal", "checkpoint", "resume-source"
STREAMS = "await-source-streams"
# Connect starting the task again and Debezium reading its slot, on a loaded machine: past it
# the window ends all the same, and the history says Debezium had not come back.
STREAMS_WITHIN_S = 120.0
# Held for its window, with the database: a second slot-behind would resume the connector inside
# this one's window and write WAL past its cap, and a restart would break its checkpoint.
SLOT_HELD = "debezium-slot"
SEGMENT_MB = 16  # PostgreSQL's default WAL segment: the unit a slot keeps and the cap counts
SETTING = database.SLOT_CAP


def _debeziums(conn: psycopg.Connection[Any]) -> list[database.Slot]:
    """The run database's slots but the truth's: Debezium's."""
    return [s for s in database.slots(conn) if s.plugin != TRUTH_PLUGIN]


@dataclass
class _Behind(Actor):
    fault: SlotBehind
    context: Context
    stopped: bool = False
    capped: bool = False
    written: int = 0  # the LSN past the WAL it wrote
    resumed: float = 0.0  # time.monotonic() of the resume
    streams: str = ""  # how its slot was once Debezium read it again (``_streams``)

    @property
    def about(self) -> str:
        return "Debezium's slot"

    def take(self, step: Step) -> None:
        if step.action == AWAIT:
            pass  # it holds the slot and the database now
        elif step.action == STOP:
            rest, name = self._rest()
            rest.stop(name)
            self.stopped = True
        elif step.action == STOPPED:
            detail = "Debezium's connector stopped through Connect's REST API (its task shut down)"
            self.context.record(EventKind.FAULT_STEP, self.fault, detail=detail)
        elif step.action == FILL:
            self._fill()
        elif step.action == CAP:
            self._checkpoint()
        elif step.action == RESUME:
            self._resume()
        elif step.action == STREAMS:
            self.context.record(EventKind.FAULT_STEP, self.fault, detail=self.streams or (
                f"Debezium did not stream from its slot within {STREAMS_WITHIN_S:.0f} s of the "
                "resume"))  # fmt: skip
        else:
            super().take(step)

    def _streams(self) -> str:
        """How Debezium's slot is after the resume, once it is read again or can never be
        ('' while neither)."""
        with psycopg.connect(self.context.database, autocommit=True) as conn:
            debezium = _debeziums(conn)
        if not debezium:
            return "Debezium's slot is gone"
        if any(s.wal_status == "lost" for s in debezium):
            return "Debezium's slot is lost: it can stream no change again"
        if all(s.active for s in debezium):
            took = time.monotonic() - self.resumed
            return f"Debezium streams from its slot again, {took:.1f} s after the resume"
        return ""

    def _rest(self) -> tuple[ConnectRest, str]:
        source = next(t for t in self.context.sources if t.runtime.connect)
        settings = ConnectSettings.from_json(source.supervisor.config.connect)
        return ConnectRest(settings), source.group

    def holds(self, step: Step) -> bool:
        """STOPPED: the connector is, with no task. CAP: the lab's own slot may restart past
        the WAL written - each look first checkpoints, which logs the running transactions a
        slot read past may restart from (the run reads the truth's slot each second; an open
        transaction holds it back, as it holds Debezium's)."""
        if step.action == AWAIT:
            held = [self.context.hold(what, self.fault) for what in (SLOT_HELD, POSTGRES_HELD)]
            return all(held)
        try:
            if step.action == STOPPED:
                rest, name = self._rest()
                state = rest.status(name)
                return state is not None and state.state == "STOPPED" and not state.tasks
            if step.action == STREAMS:
                self.streams = self._streams()
                return bool(self.streams) or time.monotonic() >= self.resumed + STREAMS_WITHIN_S
            if step.action == CAP:
                with psycopg.connect(self.context.database, autocommit=True) as conn:
                    conn.execute("CHECKPOINT")
                    truth = [s for s in database.slots(conn) if s.plugin == TRUTH_PLUGIN]
                return bool(truth) and truth[0].restart >= self.written
        except (ConnectError, psycopg.OperationalError):
            return False  # a worker or the database restarting: asked again
        return True

    def waits_until(self, step: Step) -> float | None:
        return self.resumed + STREAMS_WITHIN_S if step.action == STREAMS else None

    def _fill(self) -> None:
        fault = self.fault
        server = database.uri_of(self.context.database, "postgres")
        with psycopg.connect(server, autocommit=True) as admin:
            # Another database's WAL: no slot of the run's database decodes a change of it.
            for _ in range(fault.segments):
                admin.execute("SELECT pg_logical_emit_message(false, 'chaoslab', 'ballast')")
                admin.execute("SELECT pg_switch_wal()")
        self.written = database.current_lsn(server)
        detail = f"{fault.segments} WAL segments ({fault.wal_mb} MB) written by another database"
        self.context.record(EventKind.FAULT_STEP, fault, detail=detail)

    def _checkpoint(self) -> None:
        """A checkpoint, with the cap in force when there is one; what became of Debezium's
        slot."""
        fault = self.fault
        with psycopg.connect(self.context.database, autocommit=True) as conn:
            if fault.keep_mb is not None:
                self._capped_checkpoint(conn, fault.keep_mb)
            else:
                conn.execute("CHECKPOINT")
            debezium = _debeziums(conn)
        cap = f" with {SETTING} {fault.keep_mb} MB" if fault.keep_mb else ""
        said = ", ".join(f"slot {s.name} {s.wal_status or 'gone'}"
                         + (f" ({s.behind_mb:.0f} MB behind)" if s.restart else "")
                         for s in debezium) or "no slot of Debezium's"  # fmt: skip
        self.context.record(EventKind.FAULT_STEP, fault, detail=f"a checkpoint{cap}: {said}")

    def _capped_checkpoint(self, conn: psycopg.Connection[Any], keep_mb: int) -> None:
        """A checkpoint with the cap in force, then the cap taken back."""
        conn.execute(f"ALTER SYSTEM SET {SETTING} = '{keep_mb}MB'")
        self.capped = True
        conn.execute("SELECT pg_reload_conf()")

        def reloaded() -> None:  # a new session's value: the server has read its files again
            with psycopg.connect(self.context.database) as fresh:
                value = fresh.execute(f"SHOW {SETTING}").fetchone()
            if value != (f"{keep_mb}MB",):
                raise NotReady(f"{SETTING} is {value}")

        wait_for(reloaded, what=f"{SETTING} in force", timeout=30.0)
        try:
            conn.execute("CHECKPOINT")
        finally:
            self._uncap(conn)

    def _uncap(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"ALTER SYSTEM RESET {SETTING}")
        conn.execute("SELECT pg_reload_conf()")
        self.capped = False

    def _resume(self) -> None:
        rest, name = self._rest()
        rest.resume(name)
        self.stopped = False
        self.resumed = time.monotonic()
        self.context.release(self.fault)
        self.context.record(
            EventKind.FAULT_STEP,
            self.fault,
            detail="Debezium's connector resumed through Connect's REST API",
        )

    def undo(self) -> None:
        """The run ended inside the window: the cap taken back, the connector resumed."""
        if self.capped:
            try:
                with psycopg.connect(self.context.database, autocommit=True) as conn:
                    self._uncap(conn)
            except psycopg.Error:
                pass  # the server is down: its next start drops the cap (PostgresServer.prepare)
        if self.stopped:
            with contextlib.suppress(ConnectError):  # no worker answers: the run is ending
                self._resume()
        self.context.release(self.fault)


@dataclass(frozen=True)
class SlotBehind(Timed):
    """Stop a Debezium source's connector for ``duration`` seconds, then write ``wal_mb`` MB of
    WAL past its slot and checkpoint, with ``max_slot_wal_keep_size`` at ``keep_mb`` MB when
    given; then resume it."""

    kind: ClassVar[str] = "slot-behind"
    name: str
    duration: float
    wal_mb: int = 128
    keep_mb: int | None = None
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0

    @property
    def segments(self) -> int:
        return -(-self.wal_mb // SEGMENT_MB)

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if not SEGMENT_MB <= self.wal_mb <= 4096:
            found.append(("wal_mb", f"from {SEGMENT_MB} to 4096 (MB), got {self.wal_mb}"))
        if self.keep_mb is not None and not 1 <= self.keep_mb <= 1_048_576:
            found.append(("keep_mb", f"from 1 to 1048576 (MB), or absent, got {self.keep_mb}"))
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), Step(AWAIT, waits=True), Step(STOP), Step(STOPPED, waits=True),
                Step(FILL, after=self.duration), Step(CAP, waits=True), Step(RESUME),
                Step(STREAMS, waits=True), Step(END))  # fmt: skip

    def actor(self, context: Context) -> Actor:
        return _Behind(self, context)

    def aim(self) -> str:
        return "Debezium's slot"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        found = needs_cdc_source(setting, "puts a CDC source's slot behind")
        if not found and not backend.server_control:
            found.append(("", f"the {backend.name} environment did not start PostgreSQL: the "
                          "lab writes no WAL into, and changes no setting of, a server it does "
                          "not own"))  # fmt: skip
        return found

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        """Drawn beside a Debezium source only; half the time with a cap above the WAL it
        writes. Never a cap the slot falls past: the lost slot is then the server's doing, not
        a broken promise of Debezium's, and every trial that drew one would be that finding
        (cdc-slot-behind shows it)."""
        if space.setting.source != SourceKind.DEBEZIUM:
            return None
        drawn = {**space.when(rng), "duration": space.seconds(rng, 2, 15),
                 "wal_mb": rng.choice((32, 64, 128))}  # fmt: skip
        if rng.random() < 0.5:
            drawn["keep_mb"] = 2 * drawn["wal_mb"]
        return drawn

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "wal_mb": 64,
                "keep_mb": SEGMENT_MB}  # fmt: skip
