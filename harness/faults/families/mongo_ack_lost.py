"""A write that MongoDB applied, whose acknowledgement never reached the consumer (Jepsen's
indeterminate operation): the fault proxy passes the consumers' write commands to the server,
then drops the server's reply and resets the connection, for ``duration`` seconds.

What the client does next is the driver's and the application's own: with retryable writes (the
drivers' default) the driver sends the write once more with the same session and transaction
number, and the server answers from its record of the first attempt instead of applying it
again; without them (``retryWrites: false``), or when the application itself writes the batch
again, a plain insert is stored twice. A transaction's ``commitTransaction`` whose reply is
lost is ``UnknownTransactionCommitResult``: the commit must be retried, not the batch.

An emulation: the lab drops the reply, no network did (the scenario, the report and the history
say so). Each variant's writes are counted apart (each writes into a database of its own): one
in ``every`` loses its reply, ``times`` in all; a retry of such a write gets its answer
(``harness.environment.proxy.rules``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities, Link, LinkRule
from harness.faults.base import (
    Actor,
    Context,
    LinkRuleActor,
    Seen,
    Setting,
    Space,
    Step,
    Timed,
    needs_link_proxies,
    positive,
)
from harness.faults.families.mongo import draw_on_writes
from harness.history.events import EventKind
from harness.pipeline.runtimes import Runtime
from harness.records import Problem

ON, OFF = "ack-lost-on", "ack-lost-off"
# The commands that write: what a consumer's insert_many, bulk_write, replace_one, update_one,
# find_one_and_update and a transaction's commit send.
WRITE_COMMANDS = ("insert", "update", "delete", "findAndModify", "commitTransaction")
TALLY = "replies dropped"


@dataclass(frozen=True)
class MongoAckLost(Timed):
    """For ``duration`` seconds, the replies to the consumers' ``commands`` are dropped after
    MongoDB applied them (one in ``every`` of each variant's, ``times`` in all if given) and
    their connections reset."""

    kind: ClassVar[str] = "mongo-ack-lost"
    name: str
    duration: float
    commands: tuple[str, ...] = WRITE_COMMANDS
    every: int = 1
    times: int = 0  # 0: every ``every``-th write while the window lasts
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if not self.commands:
            found.append(("commands", f"name at least one, e.g. {list(WRITE_COMMANDS)}"))
        if self.every < 1:
            found.append(("every", f"must be >= 1, got {self.every}"))
        found += positive("times", self.times, allow_zero=True)
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    def actor(self, context: Context) -> Actor:
        rule = LinkRule(Link.CONSUMER_MONGO, "ack-lost", commands=self.commands,
                        every=self.every, times=self.times)  # fmt: skip
        return LinkRuleActor(context, rule, ON, OFF, fault=self, tally=TALLY)

    @classmethod
    def injects(cls, runtime: Runtime) -> frozenset[EventKind]:
        # The reset the client sees, and what it says of it: the lab's, not a network's.
        return frozenset({EventKind.MONGO_ERROR, EventKind.WRITE_FAILED, EventKind.CONSUMER_LOG})

    def why_unfired(self, seen: Seen) -> str:
        """It fired if its window opened while the variant was at work and it dropped a reply
        (the proxy serves every lane: which lane's write it was, only a lane's own driver
        says - its MONGO_ERROR events)."""
        if why := super().why_unfired(seen):
            return why
        dropped = sum(
            e.count or 0
            for e in seen.events
            if e.kind is EventKind.FAULT_STEP and e.fault == self.name and TALLY in e.detail
        )
        return "" if dropped else "no write's reply was dropped while it held"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return needs_link_proxies(backend)

    def aim(self) -> str:
        return "MongoDB's replies to " + ", ".join(self.commands)

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        return draw_on_writes(rng, space, WRITE_COMMANDS, lambda r: {"every": r.randint(1, 5)})

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration,
                "commands": ["insert", "commitTransaction"], "every": 3}  # fmt: skip
