"""Each backend's options and abilities, as small records: what the registry (``backends``)
builds from a request and checks a scenario against, importable without the backend's own
modules (docker and testcontainers, for the containers one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit

from pymongo.errors import ConfigurationError, InvalidURI
from pymongo.uri_parser import parse_uri

from harness.environment.base import BackendAbilities
from harness.environment.servers.kafka import NODE_IDS
from harness.errors import BadInput

LOCAL_ABILITIES = BackendAbilities(
    "local", nodes=NODE_IDS, link_faults=True, second=True, postgres=True, postgres_link=True
)
CONTAINERS_ABILITIES = BackendAbilities(
    "containers", nodes=NODE_IDS, link_faults=True, containers=True, postgres=True,
    postgres_link=True,
)  # fmt: skip


def external_abilities(nodes: tuple[int, ...] | None = None) -> BackendAbilities:
    """The external backend's abilities: its nodes are known once ``up`` asked (None before)."""
    return BackendAbilities(
        "external", nodes=nodes, link_faults=True, server_control=False, test_commands=False,
        postgres=True,  # given with --postgres-uri, and checked at up
    )  # fmt: skip


def _spark_cores(cores: int) -> None:
    if cores < 1:
        raise BadInput(f"spark cores must be at least 1, got {cores}")


@dataclass(frozen=True)
class LocalOptions:
    spark_standalone: bool = False  # run a Spark master and worker as processes
    spark_cores: int = 2
    postgres: bool = False  # run PostgreSQL (a CDC source's database) from up on

    def __post_init__(self) -> None:
        _spark_cores(self.spark_cores)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        """Options as the state file keeps them (``asdict``) back into their record."""
        return cls(**raw)


@dataclass(frozen=True)
class ContainersOptions:
    spark_cores: int = 2
    spark_standalone: bool = False  # start the Spark master and workers at up
    postgres: bool = False  # run PostgreSQL (a CDC source's database) from up on

    def __post_init__(self) -> None:
        _spark_cores(self.spark_cores)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        return cls(**raw)


def address(text: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT``, or None."""
    host, _, port = text.strip().rpartition(":")
    return (host, int(port)) if host and port.isdigit() and 0 < int(port) < 65536 else None


@dataclass(frozen=True)
class ExternalOptions:
    """What the user gives (``--kafka-bootstrap``, ``--mongo-uri``, ``--spark-master``), and what
    ``up`` found there (kept for the environment's life)."""

    kafka_bootstrap: str = ""
    mongo_uri: str = ""
    spark_master: str = ""  # spark://HOST:PORT; '' runs Spark in the driver
    spark_cores: int = 2  # local[N] when there is no master
    postgres_uri: str = ""  # a CDC source's database (postgresql://USER@HOST:PORT/DB); optional
    # Found at up: each broker as it advertises itself, and MongoDB's primary.
    brokers: tuple[tuple[int, str], ...] = ()
    mongo_primary: str = ""

    def problems(self) -> list[str]:
        """Every problem of the given settings, without connecting to anything."""
        found = []
        if not self.kafka_bootstrap:
            found.append("--kafka-bootstrap is missing (HOST:PORT[,HOST:PORT...])")
        elif bad := [a for a in self.kafka_bootstrap.split(",") if address(a) is None]:
            found.append(f"--kafka-bootstrap: not HOST:PORT: {', '.join(map(repr, bad))}")
        if not self.mongo_uri:
            found.append("--mongo-uri is missing (mongodb://HOST:PORT/?replicaSet=NAME)")
        elif self.mongo_uri.startswith("mongodb+srv://"):
            found.append(
                "--mongo-uri: mongodb+srv:// is not supported (the fault proxy needs the "
                "members' addresses; give them as mongodb://HOST:PORT,...)"
            )
        else:
            try:
                parse_uri(self.mongo_uri)
            except (InvalidURI, ConfigurationError, ValueError) as exc:
                found.append(f"--mongo-uri: {exc}")
        if self.spark_master and not (
            self.spark_master.startswith("spark://") and address(self.spark_master[8:])
        ):
            found.append(f"--spark-master: expected spark://HOST:PORT, got {self.spark_master!r}")
        if self.spark_cores < 1:
            found.append(f"spark cores must be at least 1, got {self.spark_cores}")
        if self.postgres_uri:
            parts = urlsplit(self.postgres_uri)
            if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
                found.append(
                    "--postgres-uri: expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE, "
                    f"got {self.postgres_uri!r}"
                )
        return found

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        brokers = tuple((int(n), str(a)) for n, a in raw.get("brokers") or ())
        return cls(**{**raw, "brokers": brokers})


Options = LocalOptions | ExternalOptions | ContainersOptions
