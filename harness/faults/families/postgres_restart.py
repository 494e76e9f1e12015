"""A CDC source's PostgreSQL restarted under the run: its fast shutdown (SIGINT, what ``pg_ctl
stop`` does: open transactions rolled back, clients cut off, a checkpoint) or SIGKILL when
``hard`` (crash recovery from the WAL at the next start), then started again on the same
address with its data. The application's and Debezium's connections break; each reconnects as
its own code says, and Debezium resumes from its slot."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities, Component
from harness.faults.base import Setting, Space, needs_cdc_source
from harness.faults.families.mongo_restart import ServerRestart
from harness.records import Problem
from harness.sources.spec import SourceKind

POSTGRES_HELD = "postgres"  # what Context.hold calls it


@dataclass(frozen=True)
class PostgresRestart(ServerRestart):
    """Restart the environment's PostgreSQL (a Debezium source's database): cleanly, or hard;
    ``down_for`` seconds down (hard only) before it starts again."""

    kind: ClassVar[str] = "postgres-restart"
    server: ClassVar[str] = "PostgreSQL"
    component: ClassVar[Component] = Component.POSTGRES
    held: ClassVar[str] = POSTGRES_HELD
    clean_stop: ClassVar[str] = "fast shutdown (SIGINT)"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        return needs_cdc_source(setting, "restarts a CDC source's database") or super().refusals(
            setting, backend
        )

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        """Drawn beside a Debezium source only."""
        return super().draw(rng, space) if space.setting.source == SourceKind.DEBEZIUM else None
