"""The external backend: Kafka, MongoDB and (optionally) a Spark master that the lab did not
start - a team's own cluster, a CI service - with the lab's fault proxy in front of them.

The lab starts one process here, the fault proxy: a Kafka listener per broker the cluster
advertises (found at ``up``), whose responses it rewrites so that clients come back through it
(Kafka's Metadata and FindCoordinator name the brokers' own addresses, which the lab cannot
change on servers it did not start), and a TCP listener in front of MongoDB's primary. So the
link faults (``network``, ``broker-slow``, ``commit-failure`` through the proxy) and the
consumer-side faults (crashes, pauses, executor loss, an unwritable checkpoint) work; faults
that stop, kill or pause a server, and MongoDB's ``failCommand`` (a test command such a server
may not enable), are refused by name before anything starts.

Spark: the given master (``spark://HOST:PORT``) runs every Spark lane, whatever cluster the
scenario names; without one, Spark runs in the driver (``local[N]``). The executors write the
lab's history files into the run directory, so they must see this machine's filesystem (a
cluster on this machine, or one sharing the path).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import psycopg
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from harness.environment import state
from harness.environment.base import (
    BackendAbilities,
    BackendUnavailable,
    Component,
    Link,
)
from harness.environment.options import ExternalOptions, address, external_abilities
from harness.environment.process_environment import ProcessEnvironment
from harness.environment.servers.base import LocalServer
from harness.environment.servers.proxy import FaultProxy, proxy_port_names
from harness.environment.spark import SparkCluster, SparkSettings
from harness.errors import BadInput
from harness.kafka.clients import admin

PROBE_TIMEOUT_S = 10.0  # each service's first answer, at ``up``


class NotStartedHere(BadInput):
    """The external environment cannot stop, kill or pause a server it did not start."""


@dataclass(frozen=True)
class _Answer:
    """What one service said at ``up``: what was found, or the problem."""

    found: Any = None
    problem: str = ""


def _kafka_brokers(bootstrap: str) -> _Answer:
    try:
        metadata = admin(bootstrap).list_topics(timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # whatever librdkafka says, the user needs to read it
        return _Answer(problem=f"Kafka at {bootstrap} did not answer: {exc}")
    return _Answer(tuple(sorted((n, f"{b.host}:{b.port}") for n, b in metadata.brokers.items())))


def _mongo_primary(uri: str) -> _Answer:
    client: MongoClient[dict[str, Any]] = MongoClient(
        uri, serverSelectionTimeoutMS=int(PROBE_TIMEOUT_S * 1000)
    )
    try:
        hello = client.admin.command("hello")
    except PyMongoError as exc:
        return _Answer(problem=f"MongoDB at {uri} did not answer: {exc}")
    finally:
        client.close()
    if not hello.get("setName"):
        return _Answer(
            problem=f"MongoDB at {uri} is not a replica set member: the variants use sessions "
            "and transactions, which need one"
        )
    if not hello.get("primary"):
        return _Answer(problem=f"MongoDB at {uri}: its replica set has no primary")
    return _Answer(str(hello["primary"]))


def _spark_master(master: str) -> _Answer:
    if not master:
        return _Answer()
    where = address(master[len("spark://") :])
    assert where is not None  # problems() checked it
    try:
        with socket.create_connection(where, timeout=PROBE_TIMEOUT_S):
            return _Answer()
    except OSError as exc:
        return _Answer(problem=f"the Spark master {master} did not answer: {exc}")


# A run of a CDC source takes a slot and a WAL sender for Debezium, and a slot for the lab's own
# reader of what the database committed.
SLOTS_NEEDED, SENDERS_NEEDED = 2, 1


def postgres_problems(
    wal_level: str, replication: bool, slots_free: int, senders_free: int
) -> list[str]:
    """What keeps a database from being a CDC source's, each with what fixes it."""
    found = []
    if wal_level != "logical":
        found.append(
            f"wal_level is {wal_level}: logical decoding needs logical (ALTER SYSTEM SET "
            "wal_level = logical, then restart the server)"
        )
    if not replication:
        found.append(
            "the user has no REPLICATION privilege: Debezium's slot needs it (ALTER ROLE ... "
            "REPLICATION)"
        )
    if slots_free < SLOTS_NEEDED:
        found.append(
            f"{slots_free} free replication slots of max_replication_slots: a run needs "
            f"{SLOTS_NEEDED} (Debezium's and the lab's reader's)"
        )
    if senders_free < SENDERS_NEEDED:
        found.append(f"{senders_free} free WAL senders of max_wal_senders: Debezium needs one")
    return found


def _postgres(uri: str) -> _Answer:
    if not uri:
        return _Answer()
    try:
        with psycopg.connect(uri, connect_timeout=int(PROBE_TIMEOUT_S)) as conn:
            row = conn.execute(
                "SELECT current_setting('wal_level'), "
                "(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), "
                "current_setting('max_replication_slots')::int "
                "- (SELECT count(*) FROM pg_replication_slots), "
                "current_setting('max_wal_senders')::int "
                "- (SELECT count(*) FROM pg_stat_replication)"
            ).fetchone()
    except psycopg.Error as exc:
        return _Answer(problem=f"PostgreSQL at {uri} did not answer: {str(exc).strip()}")
    assert row is not None
    if found := postgres_problems(str(row[0]), bool(row[1]), int(row[2]), int(row[3])):
        return _Answer(problem=f"PostgreSQL at {uri}: " + "; ".join(found))
    return _Answer()


def discover(options: ExternalOptions) -> ExternalOptions:
    """The options with the brokers and MongoDB's primary filled in; BadInput naming every
    service that did not answer as it should (nothing has been started yet). The services are
    asked side by side: one that does not answer costs PROBE_TIMEOUT_S once, not per service."""
    if problems := options.problems():
        raise BadInput("the external environment's settings: " + "; ".join(problems))
    with ThreadPoolExecutor(4) as pool:
        kafka = pool.submit(_kafka_brokers, options.kafka_bootstrap)
        mongo = pool.submit(_mongo_primary, options.mongo_uri)
        spark = pool.submit(_spark_master, options.spark_master)
        postgres = pool.submit(_postgres, options.postgres_uri)
        answers = [kafka.result(), mongo.result(), spark.result(), postgres.result()]
    if found := [a.problem for a in answers if a.problem]:
        raise BadInput("the external environment cannot start: " + "; ".join(found))
    return replace(options, brokers=answers[0].found, mongo_primary=answers[1].found)


def proxied_uri(mongo_uri: str, address: str) -> str:
    """``mongo_uri`` with its hosts replaced by ``address``, connecting directly (a replica set
    URI would discover the members and go around the proxy); credentials and other options
    are kept."""
    parts = urlsplit(mongo_uri)
    userinfo, _, _hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@{address}" if userinfo else address
    options = [o for o in parts.query.split("&") if o and not o.lower().startswith(
        ("replicaset=", "directconnection="))]  # fmt: skip
    query = "&".join([*options, "directConnection=true"])
    return f"mongodb://{netloc}{parts.path or '/'}?{query}"


class ExternalEnvironment(ProcessEnvironment[ExternalOptions]):
    """Servers the lab did not start, behind the lab's fault proxy (see the module)."""

    options_type = ExternalOptions

    def start(self, *, detach: bool = False) -> Self:
        self._progress(f"asking Kafka at {self.options.kafka_bootstrap} for its brokers")
        self.options = discover(self.options)
        nodes = ", ".join(f"{n} at {a}" for n, a in self.options.brokers)
        self._progress(f"  Kafka nodes {nodes}; MongoDB primary {self.options.mongo_primary}")
        return super().start(detach=detach)

    def _port_names(self) -> Sequence[str]:
        return proxy_port_names(self.broker_ids)

    def _servers(self) -> list[LocalServer]:
        return [self._proxy]

    @property
    def _proxy(self) -> FaultProxy:
        return FaultProxy(
            self._ctx(),
            kafka=dict(self.options.brokers),
            mongo=self.options.mongo_primary,
            rewrite_addresses=True,
        )

    def _start_servers(self) -> None:
        self.spark.prepare()
        self._launch(self._proxy)
        self._await_ready(self._proxy)

    # -- what clients use -----------------------------------------------------------------------

    @property
    def abilities(self) -> BackendAbilities:
        return external_abilities(self.broker_ids)

    @property
    def kafka_bootstrap(self) -> str:
        # Through the fault proxy, whose listeners rewrite the brokers' addresses.
        return self._proxy.kafka_address

    @property
    def mongo_uri(self) -> str:
        return self.options.mongo_uri

    def mongo_uri_for(self, link: Link) -> str:
        if link is Link.CONSUMER_MONGO:
            return proxied_uri(self.options.mongo_uri, self._proxy.mongo_address)
        return self.mongo_uri

    @property
    def spark(self) -> SparkSettings:
        master = self.options.spark_master or f"local[{self.options.spark_cores}]"
        return SparkSettings.for_directory(self.directory, master)

    def spark_on(self, cluster: SparkCluster, run_dir: Path | None = None) -> SparkSettings:
        if cluster is SparkCluster.STANDALONE and not self.options.spark_master:
            raise BackendUnavailable(
                "the scenario runs Spark on a standalone cluster: give the external "
                "environment one (--spark-master spark://HOST:PORT)"
            )
        return self.spark

    def postgres_uri(self) -> str:
        if not self.options.postgres_uri:
            raise BackendUnavailable(
                "the scenario's source reads PostgreSQL: give the external environment one "
                "(--postgres-uri postgresql://USER@HOST:PORT/DATABASE)"
            )
        return self.options.postgres_uri

    def _shown_postgres_uri(self, found: state.EnvironmentState) -> str:
        return self.options.postgres_uri

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.options.brokers)

    # -- what faults use ------------------------------------------------------------------------

    def _refuse(self, component: Component) -> NotStartedHere:
        return NotStartedHere(
            f"the external environment did not start {component}: it cannot stop, kill, "
            "pause or restart it"
        )

    def restart(
        self, component: Component, *, hard: bool = False, broker: int | None = None
    ) -> None:
        raise self._refuse(component)

    def kill(self, component: Component, *, broker: int | None = None) -> None:
        raise self._refuse(component)

    def revive(self, component: Component, *, broker: int | None = None) -> None:
        raise self._refuse(component)

    def pause(self, component: Component, *, broker: int | None = None) -> None:
        raise self._refuse(component)

    def resume(self, component: Component, *, broker: int | None = None) -> None:
        raise self._refuse(component)

    def begin_stop_broker(self, broker: int, *, hard: bool) -> None:
        raise self._refuse(Component.KAFKA)

    def broker_stopped(self, broker: int) -> bool:
        raise self._refuse(Component.KAFKA)

    def begin_start_broker(self, broker: int) -> None:
        raise self._refuse(Component.KAFKA)

    def broker_ready(self, broker: int) -> bool:
        raise self._refuse(Component.KAFKA)


ENVIRONMENT = ExternalEnvironment  # what the registry opens (harness.environment.backends)
