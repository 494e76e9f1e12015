"""A slow Kafka node: ``delay_ms`` added each way to every client's connections to the one node
``broker`` picks, for ``duration`` seconds, through the environment's fault proxy (the node's
own replication traffic is not delayed: it does not pass the proxy). Its partitions' leaders
answer late; the other nodes answer as before - a node on a bad disk or a noisy host."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.environment.base import KAFKA_LINKS, BackendAbilities, Link, LinkRule
from harness.faults.base import (
    Actor,
    Context,
    Setting,
    Space,
    Step,
    Timed,
    needs_link_proxies,
    positive,
)
from harness.faults.families.broker import FIRST_NODE, BrokerSelector, Do
from harness.history.events import EventKind
from harness.records import Problem

ON, OFF = "slow-broker-on", "slow-broker-off"


@dataclass
class _Slower(Actor):
    fault: BrokerSlow
    context: Context
    node: int | None = None
    chosen: int | None = None  # found by the waiting step
    rules: list[str] = field(default_factory=list)

    @property
    def about(self) -> str:
        return f"node {self.node}"

    def take(self, step: Step) -> None:
        if step.action == ON:
            chosen = self.chosen
            self.node = chosen if chosen is not None else self.fault.broker.node_in(self.context)
            detail = f"node {self.node} +{self.fault.delay_ms} ms"
            self.context.record(EventKind.FAULT_STEP, self.fault, detail=detail)
            for link in self.fault.links:
                rule = LinkRule(link, "delay", delay_ms=self.fault.delay_ms, broker=self.node)
                self.rules.append(self.context.env.add_link_rule(rule))
        elif step.action == OFF:
            self.undo()
        elif step.action == Do.AWAIT_TARGET:
            pass  # its condition came true: nothing to do
        else:
            super().take(step)

    def holds(self, step: Step) -> bool:
        self.chosen = self.fault.broker.found_in(self.context)
        return self.chosen is not None

    def undo(self) -> None:
        while self.rules:
            self.context.env.remove_link_rule(self.rules.pop())


@dataclass(frozen=True)
class BrokerSlow(Timed):
    """Delay every client's traffic to one Kafka node by ``delay_ms`` each way, for
    ``duration`` seconds (on ``links``: the consumers' and the producer's by default)."""

    kind: ClassVar[str] = "broker-slow"
    name: str
    duration: float
    delay_ms: int = 500
    at: float | None = None
    at_event: int | None = None
    jitter: float = 0.0  # seconds added to the start, drawn from the seed
    broker: BrokerSelector = FIRST_NODE
    links: tuple[Link, ...] = (Link.CONSUMER_KAFKA, Link.PRODUCER_KAFKA)

    def problems(self) -> list[Problem]:
        found = self.trigger_problems() + positive("duration", self.duration)
        found += positive("delay_ms", self.delay_ms)
        found += [("links", f"{link} is not a Kafka link") for link in self.links
                  if link not in KAFKA_LINKS]  # fmt: skip
        return found + ([("links", "name at least one Kafka link")] if not self.links else [])

    def steps(self, seed: int) -> tuple[Step, ...]:
        opening, *window = self.window(seed, ON, OFF, self.duration)
        return (opening, *self.broker.waiting(), *window)

    def actor(self, context: Context) -> Actor:
        return _Slower(self, context)

    def aim(self) -> str:
        return self.broker.aim()

    def refusals(self, setting: Setting, backend: BackendAbilities) -> list[Problem]:
        found = needs_link_proxies(backend)
        problem = self.broker.refusal(setting, backend)
        return found + ([("broker", problem)] if problem else [])

    @classmethod
    def draw(cls, rng: random.Random, space: Space) -> dict[str, Any] | None:
        links = rng.choice([[Link.CONSUMER_KAFKA], [Link.PRODUCER_KAFKA], list(KAFKA_LINKS)])
        return {**space.when(rng), "duration": space.seconds(rng, 2, 15),
                "delay_ms": rng.randint(100, 2000), "broker": space.broker(rng),
                "links": sorted(link.value for link in links)}  # fmt: skip

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {**cls.when(at, at_event), "duration": duration, "delay_ms": 500,
                "broker": {"leader-of": 0}}  # fmt: skip
