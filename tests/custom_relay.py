"""A user's own outbox relay, named ``tests.custom_relay:FirstEntryRelay`` in a scenario: a
relay that publishes only a change's first outbox entry (a bug worth catching: the stage
accounting shows every other entry lost at publish)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.outbox.relays import Relay


@dataclass
class FirstEntryRelay(Relay):
    name: ClassVar[str] = "first-entry"

    def entries(self, change: Mapping[str, Any]) -> list[dict[str, Any]]:
        return super().entries(change)[:1]
