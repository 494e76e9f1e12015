"""Fault rules: what the proxy does to which connections, and how often it did it.

A rule names a listener - or a group of them: ``kafka`` names every listener called
``kafka/...`` (one per broker of a cluster) - a client.id prefix (Kafka listeners only; ''
matches every client, including a Kafka connection that has not sent its first request yet)
and an action:

* ``cut`` - forward nothing either way; connections stay open, new ones are accepted and held
  too (a network partition). What was read is held, not dropped, and flows once the rule goes,
  as TCP's retransmissions would deliver it after a partition heals.
* ``reset`` - close matching connections at once (with a TCP RST), and new ones as soon as they
  match, while the rule lasts.
* ``delay`` - add ``delay_ms`` to every chunk (Kafka: every frame) forwarded, both directions.
* ``kafka-error`` - answer requests of ``api_keys`` with ``error_code`` instead of forwarding;
  with ``group_prefix``, only requests whose consumer group ids all start with it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.environment.proxy.kafka_messages import ERROR_VERSIONS, INT16
from harness.kafka.protocol import api_name

ACTIONS = ("cut", "reset", "delay", "kafka-error")
KAFKA, TCP = "kafka", "tcp"
MODES = (KAFKA, TCP)
MAX_DELAY_MS = 10 * 60 * 1000


class RuleError(ValueError):
    """A rule that cannot be applied (the message says which field and why)."""


@dataclass(frozen=True)
class Rule:
    id: str
    listener: str
    clients: str
    action: str
    delay_ms: int = 0
    api_keys: tuple[int, ...] = ()
    error_code: int = 0
    group_prefix: str = ""

    def matches(self, listener: str, client: str) -> bool:
        return in_group(listener, self.listener) and client.startswith(self.clients)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "api_keys": list(self.api_keys)}


def parse_rule(raw: object, rule_id: str, modes: Mapping[str, str]) -> Rule:
    """Validate a rule as posted to the control API; ``modes`` maps listener -> mode."""
    if not isinstance(raw, dict):
        raise RuleError("a rule is a JSON object")
    fields = {"listener", "clients", "action", "delay_ms", "api_keys", "error_code", "group_prefix"}
    unknown = set(raw) - fields
    if unknown:
        raise RuleError(f"unknown fields: {', '.join(sorted(unknown))}")
    listener = raw.get("listener")
    members = {
        m for name, m in modes.items() if isinstance(listener, str) and in_group(name, listener)
    }
    if len(members) != 1:
        groups = {name.split("/")[0] for name in modes} | set(modes)
        raise RuleError(f"listener: {listener!r} is not one of {', '.join(sorted(groups))}")
    (mode,) = members
    assert isinstance(listener, str)  # members is empty otherwise
    action = raw.get("action")
    if action not in ACTIONS:
        raise RuleError(f"action: {action!r} is not one of {', '.join(ACTIONS)}")
    clients = _typed(raw, "clients", str, "")
    delay_ms = _typed(raw, "delay_ms", int, 0)
    error_code = _typed(raw, "error_code", int, 0)
    group_prefix = _typed(raw, "group_prefix", str, "")
    api_keys = raw.get("api_keys", [])
    if not isinstance(api_keys, list) or not all(_is_int(k) for k in api_keys):
        raise RuleError("api_keys: must be a list of integers")
    if clients and mode != KAFKA:
        raise RuleError(f"clients: listener {listener} is {mode}: it cannot tell clients apart")
    if action == "delay" and not 0 < delay_ms <= MAX_DELAY_MS:
        raise RuleError(f"delay_ms: must be in 1..{MAX_DELAY_MS} for a delay, got {delay_ms}")
    if action != "delay" and delay_ms:
        raise RuleError(f"delay_ms: only a delay has one (action {action})")
    if action == "kafka-error":
        if mode != KAFKA:
            raise RuleError(f"action: kafka-error needs a Kafka listener; {listener} is {mode}")
        if not api_keys:
            raise RuleError("api_keys: name at least one API for kafka-error")
        unsupported = [k for k in api_keys if k not in ERROR_VERSIONS]
        if unsupported:
            supported = ", ".join(f"{k} ({api_name(k)})" for k in ERROR_VERSIONS)
            raise RuleError(f"api_keys: cannot answer {unsupported}; supported: {supported}")
        if error_code == 0 or error_code not in INT16:
            raise RuleError(f"error_code: must be a non-zero int16, got {error_code}")
    elif api_keys or error_code or group_prefix:
        raise RuleError(
            f"api_keys, error_code, group_prefix: only kafka-error has them (action {action})"
        )
    return Rule(
        rule_id, listener, clients, action, delay_ms, tuple(api_keys), error_code, group_prefix
    )


def in_group(listener: str, name: str) -> bool:
    """Whether ``listener`` is the listener ``name``, or one of the group ``name/...``."""
    return listener == name or listener.startswith(f"{name}/")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _typed(raw: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = raw.get(key, default)
    if not isinstance(value, kind) or (kind is int and not _is_int(value)):
        raise RuleError(f"{key}: must be {kind.__name__}, got {value!r}")
    return value


class RuleTable:
    """The rules in force, in the order they were added, and how often each one acted."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] = {}
        self._serial = 0
        self.affected: Counter[str] = Counter()  # rule id -> requests / chunks / connections
        self._changed = asyncio.Event()

    def next_id(self) -> str:
        self._serial += 1
        return f"r{self._serial}"

    def add(self, rule: Rule) -> None:
        self._rules[rule.id] = rule
        self._notify()

    def remove(self, rule_id: str) -> bool:
        found = self._rules.pop(rule_id, None) is not None
        if found:
            self._notify()
        return found

    def clear(self) -> int:
        count = len(self._rules)
        self._rules.clear()
        self._notify()
        return count

    def __iter__(self) -> Iterator[Rule]:
        return iter(list(self._rules.values()))

    def matching(self, action: str, listener: str, client: str) -> list[Rule]:
        return [
            r for r in self._rules.values() if r.action == action and r.matches(listener, client)
        ]

    def count(self, rules: list[Rule], times: int = 1) -> None:
        for rule in rules:
            self.affected[rule.id] += times

    def delay_s(self, listener: str, client: str) -> float:
        """The delay to add to a chunk read now (delays add up); counts each delay rule."""
        rules = self.matching("delay", listener, client)
        self.count(rules)
        return sum(r.delay_ms for r in rules) / 1000

    def kafka_error(
        self, listener: str, client: str, api_key: int, groups: Callable[[], list[str]]
    ) -> Rule | None:
        """The oldest kafka-error rule for this request, if any; ``groups`` reads the consumer
        group ids it is for (asked only of a rule with a group prefix)."""
        for rule in self.matching("kafka-error", listener, client):
            if api_key not in rule.api_keys:
                continue
            if not rule.group_prefix:
                return rule
            ids = groups()
            if ids and all(g.startswith(rule.group_prefix) for g in ids):
                return rule
        return None

    async def changed(self) -> None:
        """Returns after the next change to the rules."""
        await self._changed.wait()

    def _notify(self) -> None:
        # Wake everyone waiting on this generation; later waiters wait for the next change.
        self._changed.set()
        self._changed = asyncio.Event()
