"""The fault proxy as a server the lab starts (every backend runs one), and which of its rules a
link means.

Every Kafka client reaches the cluster through the proxy: it has one Kafka listener per node
(``kafka/1``, ``kafka/2``, ``kafka/3``), each node advertises its listener as the address of its
CLIENT listener, so the connections a client makes after bootstrap come back through the proxy
too; a rule on ``kafka`` covers all three. The producer and consumer links share those
addresses and are told apart by client.id (``harness.kafka.clients``'s ``PRODUCER_CLIENT``,
``CONSUMER_CLIENT``; the harness's own ``HARNESS_CLIENT`` is never a target). The consumers'
MongoDB link is a listener in front of SecantusDB that reads MongoDB's messages (to drop a
write's reply: ``ack-lost``). A CDC source's link to PostgreSQL is a plain TCP listener in front
of the database's port, there from the environment's start (PostgreSQL starts when a CDC run
first asks for it). In front of servers the lab did not
start (the external backend), the proxy rewrites the brokers' addresses in Kafka's responses
instead (``rewrite_addresses``; ``harness.environment.proxy.addresses``).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping

from harness.environment.base import Link, LinkRule
from harness.environment.ports import LOOPBACK
from harness.environment.proxy.client import ProxyControl
from harness.environment.servers.base import LocalServer, ServerContext
from harness.kafka.clients import CONSUMER_CLIENT, PRODUCER_CLIENT

KAFKA_LISTENER = "kafka"  # the group of the nodes' listeners, kafka/1 ...
MONGO_LISTENER = "mongo"
POSTGRES_LISTENER = "postgres"


def link_target(link: Link) -> tuple[str, str]:
    """The proxy listener a link runs through, and the client.id prefix of its clients."""
    targets = {
        Link.PRODUCER_KAFKA: (KAFKA_LISTENER, PRODUCER_CLIENT),
        Link.CONSUMER_KAFKA: (KAFKA_LISTENER, CONSUMER_CLIENT),
        Link.CONSUMER_MONGO: (MONGO_LISTENER, ""),
        Link.SOURCE_POSTGRES: (POSTGRES_LISTENER, ""),
    }
    return targets[link]


def proxy_port_names(nodes: Collection[int]) -> list[str]:
    """The proxy's ports: a Kafka listener per node, MongoDB's listener, the control API."""
    return [*(f"kafka-{n}-proxy" for n in nodes), "mongo-proxy", "proxy-control"]


class FaultProxy(LocalServer):
    name = "proxy"
    role = "fault proxy (Kafka, MongoDB, PostgreSQL links)"
    ready_timeout = 15.0

    def __init__(
        self,
        ctx: ServerContext,
        *,
        kafka: Mapping[int, str],
        mongo: str,
        rewrite_addresses: bool = False,
        postgres: str = "",
    ) -> None:
        """``kafka``: each node's address (node id -> HOST:PORT), ``mongo``: MongoDB's,
        ``postgres``: PostgreSQL's (a plain TCP listener, there before PostgreSQL is: it starts
        when a CDC run first asks for it; none: no such link)."""
        super().__init__(ctx)
        self.kafka, self.mongo, self.rewrite_addresses = dict(kafka), mongo, rewrite_addresses
        self.postgres = postgres

    @property
    def port(self) -> int:
        # The address people look for in ``status``: where Kafka clients bootstrap.
        return self.ctx.ports[f"kafka-{min(self.kafka)}-proxy"]

    @property
    def kafka_address(self) -> str:
        """Every node's listener: the bootstrap list of every Kafka client."""
        return ",".join(f"{LOOPBACK}:{self.ctx.ports[f'kafka-{n}-proxy']}" for n in self.kafka)

    @property
    def mongo_address(self) -> str:
        return f"{LOOPBACK}:{self.ctx.ports['mongo-proxy']}"

    @property
    def postgres_address(self) -> str:
        return f"{LOOPBACK}:{self.ctx.ports['postgres-proxy']}"

    def control(self) -> ProxyControl:
        return ProxyControl(LOOPBACK, self.ctx.ports["proxy-control"])

    def argv(self) -> list[str]:
        ports = self.ctx.ports
        kafka = [
            f"{KAFKA_LISTENER}/{n},kafka,{ports[f'kafka-{n}-proxy']},{address}"
            for n, address in self.kafka.items()
        ]
        mongo = f"{MONGO_LISTENER},mongo,{ports['mongo-proxy']},{self.mongo}"
        specs = [*kafka, mongo]
        if self.postgres:
            specs.append(f"{POSTGRES_LISTENER},tcp,{ports['postgres-proxy']},{self.postgres}")
        listeners = [arg for spec in specs for arg in ("--listener", spec)]
        rewrite = ["--rewrite-addresses"] if self.rewrite_addresses else []
        return [sys.executable, "-m", "harness.environment.proxy",
                "--control", str(ports["proxy-control"]), *listeners, *rewrite]  # fmt: skip

    def probe(self) -> None:
        self.control().health()

    def add_rule(self, rule: LinkRule) -> str:
        listener, clients = link_target(rule.link)
        if rule.broker is not None:
            listener = f"{listener}/{rule.broker}"  # that node's listener only
        return self.control().add_rule(
            listener,
            rule.action,
            clients=clients,
            delay_ms=rule.delay_ms,
            api_keys=rule.api_keys,
            error_code=rule.error_code,
            group_prefix=rule.group_prefix,
            commands=rule.commands,
            every=rule.every,
            times=rule.times,
        )
