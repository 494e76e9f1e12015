"""Network faults on one link, through the environment's fault proxy: cut, reset or delay."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from harness.environment.base import BackendAbilities, Link, LinkRule
from harness.faults.base import (
    Actor,
    Context,
    LinkRuleActor,
    Setting,
    Space,
    Step,
    Timed,
    needs_cdc_source,
    needs_link_proxies,
    positive,
)
from harness.records import Problem
from harness.sources.spec import SourceKind

ON, OFF = "link-fault-on", "link-fault-off"


class NetworkAction(StrEnum):
    CUT = "cut"  # nothing gets through either way; connections stay open
    RESET = "reset"  # connections are closed, new ones too
    DELAY = "delay"  # delay_ms added each way


# What the proxy counts of each action's rule, said in the history when the window ends: what
# the fault did, which no client's history shows (a reset in a client's retry delay hits none).
TALLIES = {
    NetworkAction.CUT: "connections held",
    NetworkAction.RESET: "connections reset",
    NetworkAction.DELAY: "chunks delayed",
}


@dataclass(frozen=True)
class NetworkFault(Timed):
    """Cut, reset or delay one link for ``duration`` seconds, through the environment's proxy."""

    kind: ClassVar[str] = "network"
    name: str
    link: Link
    action: NetworkAction
    duration: float
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    delay_ms: int = 0

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        if self.action is NetworkAction.DELAY:
            found += positive("delay_ms", self.delay_ms)
        return found

    def steps(self, seed: int) -> tuple[Step, ...]:
        return self.window(seed, ON, OFF, self.duration)

    def actor(self, context: Context) -> Actor:
        rule = LinkRule(self.link, self.action.value, delay_ms=self.delay_ms)
        return LinkRuleActor(context, rule, ON, OFF, fault=self, tally=TALLIES[self.action])

    def aim(self) -> str:
        return f"link {self.link}"

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        if self.link is not Link.SOURCE_POSTGRES:
            return needs_link_proxies(backend)
        if refused := needs_cdc_source(setting, f"{self.link} is a CDC source's link to its "
                                       "database", at="link"):  # fmt: skip
            return refused
        if not backend.postgres_link:
            return [("link", f"the {backend.name} backend has no proxy on {self.link}")]
        return []

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        action = rng.choice(list(NetworkAction))
        delay = {"delay_ms": rng.randint(100, 3000)} if action is NetworkAction.DELAY else {}
        # A CDC source's link beside a Debezium source alone (the others' draws unchanged).
        cdc = space.setting.source == SourceKind.DEBEZIUM and space.backend.postgres_link
        links = [link for link in Link if cdc or link is not Link.SOURCE_POSTGRES]
        return {**space.when(rng), "duration": space.seconds(rng, 1, 10),
                "link": rng.choice(links).value, "action": action.value, **delay}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "link": "consumer-mongo",
                "action": "cut"}  # fmt: skip
