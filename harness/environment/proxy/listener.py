"""A listener of the proxy: where it accepts connections, where it forwards them, what it saw."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from harness.environment.proxy.rules import MODES
from harness.kafka.protocol import api_name

log = logging.getLogger("chaoslab.proxy")


@dataclass(frozen=True)
class ListenerSpec:
    name: str
    mode: str  # kafka | tcp | mongo
    port: int  # on 127.0.0.1
    upstream_host: str
    upstream_port: int

    @classmethod
    def parse(cls, text: str) -> ListenerSpec:
        """``name,mode,port,host:port`` (the command-line form, see ``to_arg``)."""
        try:
            name, mode, port, upstream = text.split(",")
            host, upstream_port = upstream.rsplit(":", 1)
            spec = cls(name, mode, int(port), host, int(upstream_port))
        except ValueError:
            raise ValueError(f"listener {text!r}: expected name,mode,port,host:port") from None
        if mode not in MODES:
            raise ValueError(f"listener {text!r}: mode must be one of {', '.join(MODES)}")
        return spec

    def to_arg(self) -> str:
        return f"{self.name},{self.mode},{self.port},{self.upstream_host}:{self.upstream_port}"

    @property
    def upstream(self) -> str:
        return f"{self.upstream_host}:{self.upstream_port}"


@dataclass
class ListenerStats:
    accepted: int = 0
    open: int = 0
    # Kafka: client.id -> API name -> the versions its requests used.
    apis: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def saw_request(self, listener: str, client: str, api_key: int, version: int) -> None:
        versions = self.apis.setdefault(client, {}).setdefault(api_name(api_key), [])
        if version not in versions:
            versions.append(version)
            # Which versions clients negotiate decides which layouts kafka-error must encode.
            log.info("%s: client %r sends %s v%d", listener, client, api_name(api_key), version)

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "open": self.open, "apis": self.apis}
