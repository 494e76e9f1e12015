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
* ``ack-lost`` (MongoDB listeners) - forward a command named in ``commands`` to the server, then
  drop the server's reply and reset the connection: the write is applied, and the client sees a
  network error instead of its acknowledgement. Counted per database (each variant of a run
  writes into its own, so each loses the same share whatever its pace): one matching write in
  ``every`` loses its reply, ``times`` in all (0: no limit). A transaction's commit names the
  admin database: it counts for the database its session wrote into. A retry of a write whose
  reply was dropped - the same command, session and transaction number, as the driver's
  retryable writes send it - is forwarded and answered: each write loses its acknowledgement
  once, as a network blip would take it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.environment.proxy.kafka_messages import ERROR_VERSIONS, INT16
from harness.environment.proxy.mongo_messages import Command
from harness.kafka.protocol import api_name

ACTIONS = ("cut", "reset", "delay", "kafka-error", "ack-lost")
KAFKA, TCP, MONGO = "kafka", "tcp", "mongo"
MODES = (KAFKA, TCP, MONGO)
MAX_DELAY_MS = 10 * 60 * 1000
_SESSIONS = 10_000  # sessions whose database ack-lost remembers (a consumer reuses a few)


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
    commands: tuple[str, ...] = ()
    every: int = 1
    times: int = 0

    def matches(self, listener: str, client: str) -> bool:
        return in_group(listener, self.listener) and client.startswith(self.clients)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "api_keys": list(self.api_keys), "commands": list(self.commands)}


def parse_rule(raw: object, rule_id: str, modes: Mapping[str, str]) -> Rule:
    """Validate a rule as posted to the control API; ``modes`` maps listener -> mode."""
    if not isinstance(raw, dict):
        raise RuleError("a rule is a JSON object")
    fields = {"listener", "clients", "action", "delay_ms", "api_keys", "error_code",
              "group_prefix", "commands", "every", "times"}  # fmt: skip
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
    every = _typed(raw, "every", int, 1)
    times = _typed(raw, "times", int, 0)
    api_keys = raw.get("api_keys", [])
    if not isinstance(api_keys, list) or not all(_is_int(k) for k in api_keys):
        raise RuleError("api_keys: must be a list of integers")
    commands = raw.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, str) and c for c in commands):
        raise RuleError("commands: must be a list of command names")
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
    if action == "ack-lost":
        if mode != MONGO:
            raise RuleError(f"action: ack-lost needs a MongoDB listener; {listener} is {mode}")
        if not commands:
            raise RuleError("commands: name at least one command for ack-lost, e.g. insert")
        if every < 1:
            raise RuleError(f"every: must be >= 1, got {every}")
        if times < 0:
            raise RuleError(f"times: must be >= 0 (0: no limit), got {times}")
    elif commands or every != 1 or times:
        raise RuleError(f"commands, every, times: only ack-lost has them (action {action})")
    return Rule(
        rule_id,
        listener,
        clients,
        action,
        delay_ms,
        tuple(api_keys),
        error_code,
        group_prefix,
        tuple(commands),
        every,
        times,
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
        # ack-lost: per rule and database, the matching writes it saw and took; the writes
        # whose reply it took; the database each session last wrote into.
        self._seen: Counter[tuple[str, str]] = Counter()
        self._taken: Counter[tuple[str, str]] = Counter()
        self._lost: dict[str, set[tuple[str, bytes, int]]] = {}
        self._databases: dict[bytes, str] = {}

    def next_id(self) -> str:
        self._serial += 1
        return f"r{self._serial}"

    def add(self, rule: Rule) -> None:
        self._rules[rule.id] = rule
        self._notify()

    def remove(self, rule_id: str) -> bool:
        found = self._rules.pop(rule_id, None) is not None
        self._lost.pop(rule_id, None)
        if found:
            self._notify()
        return found

    def clear(self) -> int:
        count = len(self._rules)
        self._rules.clear()
        self._lost.clear()
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

    def ack_lost(self, listener: str, command: Command) -> Rule | None:
        """The ack-lost rule that takes the reply to ``command``, if one does (it is counted
        as it acted once the reply is dropped)."""
        database = self._database(command)
        for rule in self.matching("ack-lost", listener, ""):
            if command.name not in rule.commands:
                continue
            lost = self._lost.setdefault(rule.id, set())
            write = command.write
            if write in lost:
                continue  # a retry of a write whose reply this rule took: it gets its answer
            key = (rule.id, database)
            self._seen[key] += 1
            if (self._seen[key] - 1) % rule.every or (
                rule.times and self._taken[key] >= rule.times
            ):
                continue
            self._taken[key] += 1
            if write is not None:
                lost.add(write)
            return rule
        return None

    def _database(self, command: Command) -> str:
        """The database a command writes into: its own, or for a command on ``admin`` (a
        transaction's commit) the one its session last named."""
        if command.database != "admin" or command.session is None:
            if command.session is not None:
                if len(self._databases) >= _SESSIONS:  # forget the oldest session
                    self._databases.pop(next(iter(self._databases)))
                self._databases[command.session] = command.database
            return command.database
        return self._databases.get(command.session, command.database)

    def has(self, action: str, listener: str) -> bool:
        """Whether a rule of ``action`` is in force on ``listener`` for any client."""
        rules = self._rules.values()
        return any(r.action == action and in_group(listener, r.listener) for r in rules)

    async def changed(self) -> None:
        """Returns after the next change to the rules."""
        await self._changed.wait()

    def _notify(self) -> None:
        # Wake everyone waiting on this generation; later waiters wait for the next change.
        self._changed.set()
        self._changed = asyncio.Event()
