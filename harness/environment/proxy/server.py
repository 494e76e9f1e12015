"""The proxy: its listeners, the connections they accepted, and the rules applied to them."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from typing import Any

from harness.environment.ports import LOOPBACK
from harness.environment.proxy.addresses import AddressBook
from harness.environment.proxy.connection import CONNECT_TIMEOUT_S, Connection
from harness.environment.proxy.listener import ListenerSpec, ListenerStats
from harness.environment.proxy.rules import Rule, RuleTable, parse_rule

log = logging.getLogger("chaoslab.proxy")

# How often a listener whose upstream is down asks whether it is back.
PROBE_INTERVAL_S = 0.05


class ProxyServer:
    def __init__(
        self, specs: list[ListenerSpec], *, rewrite: bool = False, bind: str = LOOPBACK
    ) -> None:
        """``rewrite``: replace the upstream addresses of the Kafka listeners by the listeners'
        own in the responses that name brokers (see ``addresses``). ``bind``: the address the
        listeners listen on (a container's own interfaces, in the containers backend)."""
        self.bind = bind
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"listener names must differ: {names}")
        self.specs = {s.name: s for s in specs}
        self.addresses = AddressBook.for_listeners(specs) if rewrite else None
        self.rules = RuleTable()
        self.stats = {name: ListenerStats() for name in self.specs}
        self.connections: dict[str, set[Connection]] = {name: set() for name in self.specs}
        self._servers: dict[str, asyncio.Server] = {}  # listening now, by listener name
        self._numbers = itertools.count(1)
        self._handlers: set[asyncio.Task[None]] = set()
        self._probes: dict[str, asyncio.Task[None]] = {}  # listeners whose upstream is down

    async def start(self) -> None:
        for spec in self.specs.values():
            await self._listen(spec)
            log.info(
                "listener %s (%s) on %s:%d -> %s",
                spec.name,
                spec.mode,
                self.bind,
                spec.port,
                spec.upstream,
            )
        if self.addresses is not None:
            log.info("rewriting broker addresses in responses: %s", self.addresses.describe())

    async def _listen(self, spec: ListenerSpec) -> None:
        self._servers[spec.name] = await asyncio.start_server(
            functools.partial(self._accept, spec), self.bind, spec.port
        )

    async def close(self, timeout: float = 2.0) -> None:
        """Stop accepting, reset every connection, and wait (briefly) for their handlers."""
        for probe in self._probes.values():
            probe.cancel()
        for server in self._servers.values():
            server.close()
        for connections in self.connections.values():
            for connection in list(connections):
                connection.reset()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=timeout)

    async def _accept(
        self, spec: ListenerSpec, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        stats = self.stats[spec.name]
        connection = Connection(
            spec, self.rules, stats, reader, writer, next(self._numbers), self.addresses
        )
        self.connections[spec.name].add(connection)
        stats.accepted += 1
        stats.open += 1
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await connection.run()
            if connection.refused:
                self._refuse_until_up(spec)
        except asyncio.CancelledError:
            # The proxy is shutting down. Ending normally: Python 3.11's stream server logs
            # a cancelled client handler as an error.
            log.debug("%s: cancelled", connection.label)
        except Exception:
            # One connection's failure must never take the proxy (and every link) down.
            log.exception("%s: failed", connection.label)
        finally:
            stats.open -= 1
            self.connections[spec.name].discard(connection)
            self._handlers.discard(handler)

    # -- a server that is down ------------------------------------------------------------------

    def _refuse_until_up(self, spec: ListenerSpec) -> None:
        """The upstream refused a connection: stop listening, so that clients are refused as
        the server itself refuses them, until it accepts connections again.

        Why not accept and close at once: a client that connects takes the server for alive.
        With librdkafka 2.16 and a SIGKILLed group coordinator, each accepted connection put
        the consumer group back in state "up" for a moment, again and again (docs/faults.md),
        and a commit sent in such a moment was retried until the new coordinator took it, where
        against a refused port it waits for a coordinator and fails after session.timeout.ms.
        """
        if spec.name in self._probes or spec.name not in self._servers:
            return
        self._servers.pop(spec.name).close()
        log.info("listener %s: upstream %s is down, refusing", spec.name, spec.upstream)
        self._probes[spec.name] = asyncio.create_task(self._listen_when_up(spec))

    async def _listen_when_up(self, spec: ListenerSpec) -> None:
        try:
            while not await _accepts(spec.upstream_host, spec.upstream_port):
                await asyncio.sleep(PROBE_INTERVAL_S)
            while True:
                try:
                    await self._listen(spec)
                    break
                except OSError as exc:  # the port is briefly held elsewhere: ask again
                    log.warning("listener %s: cannot listen again yet (%s)", spec.name, exc)
                    await asyncio.sleep(PROBE_INTERVAL_S)
            log.info("listener %s: upstream %s is back, accepting", spec.name, spec.upstream)
        finally:
            self._probes.pop(spec.name, None)

    # -- rules ----------------------------------------------------------------------------------

    def add_rule(self, raw: object) -> Rule:
        """Validate and apply a rule (``RuleError`` if it is wrong); returns it with its id."""
        modes = {name: spec.mode for name, spec in self.specs.items()}
        rule = parse_rule(raw, self.rules.next_id(), modes)
        self.rules.add(rule)
        log.info("rule %s added: %s", rule.id, rule.to_json())
        if rule.action == "reset":
            every = [c for conns in self.connections.values() for c in conns]
            for connection in every:
                if rule.matches(connection.spec.name, connection.client):
                    self.rules.count([rule])
                    log.info("%s: reset by rule %s", connection.label, rule.id)
                    connection.reset()
        return rule

    def remove_rule(self, rule_id: str) -> bool:
        found = self.rules.remove(rule_id)
        if found:
            log.info("rule %s removed (acted %d times)", rule_id, self.rules.affected[rule_id])
        return found

    def clear_rules(self) -> int:
        count = self.rules.clear()
        log.info("all rules removed (%d)", count)
        return count

    def rule_json(self, rule: Rule) -> dict[str, Any]:
        return {**rule.to_json(), "affected": self.rules.affected[rule.id]}

    def stats_json(self) -> dict[str, Any]:
        return {
            "listeners": {
                name: {
                    "mode": spec.mode,
                    "port": spec.port,
                    "upstream": spec.upstream,
                    **self.stats[name].to_json(),
                }
                for name, spec in self.specs.items()
            },
            "rules": [self.rule_json(rule) for rule in self.rules],
            # Removed rules too: a fault runner reads how often a rule acted after removing it.
            "affected": dict(self.rules.affected),
            "rewrite_addresses": self.addresses is not None,
        }


async def _accepts(host: str, port: int) -> bool:
    """Whether ``host:port`` accepts a TCP connection now (the probe closes it at once)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True
