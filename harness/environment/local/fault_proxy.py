"""The fault proxy as a server of the local backend, and which of its rules a link means.

Every Kafka client reaches the broker through the proxy's Kafka listener: Tansu advertises the
proxy's address, so connections made after bootstrap come back through it too. The producer and
consumer links share that address and are told apart by client.id (``harness.kafka``'s
``PRODUCER_CLIENT``, ``CONSUMER_CLIENT``; the harness's own ``HARNESS_CLIENT`` is never a
target). The consumers' MongoDB link is a plain TCP listener in front of SecantusDB.
"""

from __future__ import annotations

import sys

from harness.environment.base import Link, LinkRule
from harness.environment.local.server import LocalServer
from harness.environment.ports import LOOPBACK
from harness.environment.proxy.client import ProxyControl

KAFKA_LISTENER = "kafka"
MONGO_LISTENER = "mongo"


def link_target(link: Link) -> tuple[str, str]:
    """The proxy listener a link runs through, and the client.id prefix of its clients."""
    # Imported here: harness.kafka imports harness.environment, which imports this module.
    from harness.kafka import CONSUMER_CLIENT, PRODUCER_CLIENT

    targets = {
        Link.PRODUCER_KAFKA: (KAFKA_LISTENER, PRODUCER_CLIENT),
        Link.CONSUMER_KAFKA: (KAFKA_LISTENER, CONSUMER_CLIENT),
        Link.CONSUMER_MONGO: (MONGO_LISTENER, ""),
    }
    return targets[link]


class FaultProxy(LocalServer):
    name = "proxy"
    role = "fault proxy (Kafka, MongoDB links)"
    ready_timeout = 15.0

    @property
    def port(self) -> int:
        # The address people look for in ``status``: the one every Kafka client connects to.
        return self.ctx.ports["kafka-proxy"]

    @property
    def kafka_address(self) -> str:
        return f"{LOOPBACK}:{self.ctx.ports['kafka-proxy']}"

    @property
    def mongo_address(self) -> str:
        return f"{LOOPBACK}:{self.ctx.ports['mongo-proxy']}"

    def control(self) -> ProxyControl:
        return ProxyControl(LOOPBACK, self.ctx.ports["proxy-control"])

    def argv(self) -> list[str]:
        ports = self.ctx.ports
        return [
            sys.executable,
            "-m",
            "harness.environment.proxy",
            "--control",
            str(ports["proxy-control"]),
            "--listener",
            f"{KAFKA_LISTENER},kafka,{ports['kafka-proxy']},{LOOPBACK}:{ports['kafka']}",
            "--listener",
            f"{MONGO_LISTENER},tcp,{ports['mongo-proxy']},{LOOPBACK}:{ports['mongo']}",
        ]

    def probe(self) -> None:
        self.control().health()

    def add_rule(self, rule: LinkRule) -> str:
        listener, clients = link_target(rule.link)
        return self.control().add_rule(
            listener,
            rule.action,
            clients=clients,
            delay_ms=rule.delay_ms,
            api_keys=rule.api_keys,
            error_code=rule.error_code,
        )
