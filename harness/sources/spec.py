"""Where a scenario's records come from (its ``source:``): the lab's producer, a database's
log through Debezium, or an outbox's relay.

    source: producer            # the default: the seeded workload, produced as JSON records

    source:
      kind: debezium            # the workload as SQL transactions on the environment's
      config:                   #   PostgreSQL, captured by Debezium on a Connect cluster of
        snapshot.mode: initial  #   the source's own; config is a deployment's Debezium
      connect:                  #   settings, pasted; connect its workers and their settings
        workers: 1              #   (Connect's names, as pipeline.connect has them)
        offset.flush.interval.ms: 60000
      existing: 20000           # the workload's first row changes, committed before Debezium
                                #   starts: the table its snapshot reads (0: an empty table)

    source:
      kind: outbox              # seed 003's application writing the scenario's outbox: (one
      relay: transactional      #   target topic), and one relay carrying it to Kafka: its
                                #   target topic is the one the lanes consume
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

from harness.records import Problem
from harness.sources.debezium import DebeziumSource


class SourceKind(StrEnum):
    PRODUCER = "producer"
    DEBEZIUM = "debezium"
    OUTBOX = "outbox"


# What a fault's ``of:`` names the source's Connect cluster by (``connect-worker-kill``).
SOURCE_LABEL = "source"


@dataclass(frozen=True)
class SourceSpec:
    kind: str = SourceKind.PRODUCER.value
    # Debezium's own settings over the lab's defaults (harness.sources.debezium)
    config: dict[str, Any] = field(default_factory=dict)
    # The source's Connect cluster: {workers: N} and worker settings, Connect's names
    connect: dict[str, Any] = field(default_factory=dict)
    # The workload's first row changes (whole transactions) committed before Debezium starts:
    # a deployment adding CDC to a database that has rows, which its snapshot reads.
    existing: int = 0
    # An outbox source's relay, as a scenario's relays: entry is written (a name, or a mapping
    # with its options): ``harness.scenario`` reads it.
    relay: Any = None

    @classmethod
    def of(cls, raw: Any) -> Self | Any:
        """``source: producer`` is ``{kind: producer}``; a mapping is itself."""
        return {"kind": raw} if isinstance(raw, str) else raw

    @property
    def cdc(self) -> bool:
        """Whether its records are a database's changes (its truth the database's commits)."""
        return self.kind == SourceKind.DEBEZIUM

    @property
    def outbox(self) -> bool:
        """Whether its records are an outbox relay's (its truth the entries MongoDB
        acknowledged to the application)."""
        return self.kind == SourceKind.OUTBOX

    def debezium(self) -> DebeziumSource:
        return DebeziumSource({k: str(v) for k, v in self.config.items()})

    def problems(self) -> list[Problem]:
        if self.kind not in set(SourceKind):
            return [("kind", f"one of {', '.join(SourceKind)}; got {self.kind!r}")]
        if not self.cdc:
            a = "an" if self.kind[:1] in "aeiou" else "a"
            extra = [k for k in ("config", "connect", "existing") if getattr(self, k)]
            found = [(k, f"{a} {self.kind} source has no {k}") for k in extra]
            if self.outbox and self.relay is None:
                found.append(("relay", "an outbox source needs its relay (e.g. transactional)"))
            elif not self.outbox and self.relay is not None:
                found.append(("relay", f"{a} {self.kind} source has no relay"))
            return found
        found = [(f"config.{key}", why) for key, why in self.debezium().problems()]
        if self.existing < 0:
            found.append(("existing", f"a count of row changes, 0 or more; got {self.existing}"))
        return found
