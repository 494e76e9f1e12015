"""The environment: the running servers (Kafka, MongoDB, Spark) behind one interface.

Everything else in the lab talks to an environment only through this module's types: the
addresses clients connect to, a Spark settings record, and the operations faults perform on a
component. Which processes or containers sit behind them is the backend's business.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Self

from harness.environment import process
from harness.environment.process import ProcessHandle
from harness.environment.signals import stop_on_termination
from harness.environment.spark import SparkCluster, SparkSettings
from harness.errors import BadInput, LabError
from harness.kafka.cluster import ClusterView, cluster_view
from harness.kafka.protocol import FAILABLE_APIS


class Component(StrEnum):
    """A server that faults can act on."""

    KAFKA = "kafka"
    MONGO = "mongo"
    POSTGRES = "postgres"  # a CDC source's database


class Link(StrEnum):
    """A client-to-server connection that a fault proxy can be placed on."""

    PRODUCER_KAFKA = "producer-kafka"
    CONSUMER_KAFKA = "consumer-kafka"
    CONSUMER_MONGO = "consumer-mongo"
    SOURCE_POSTGRES = "source-postgres"  # a CDC source's connection to its database


KAFKA_LINKS = frozenset({Link.PRODUCER_KAFKA, Link.CONSUMER_KAFKA})
LINK_ACTIONS = ("cut", "reset", "delay", "kafka-error", "ack-lost")


class LinkRuleRefused(BadInput):
    """A link rule that cannot be applied (e.g. a Kafka error on a MongoDB link)."""


@dataclass(frozen=True)
class LinkRule:
    """A network fault on one link, in force from ``add_link_rule`` to ``remove_link_rule``.

    * ``cut``: nothing flows either way; connections stay open, new ones hang too.
    * ``reset``: the link's connections are closed at once, and new ones as soon as they open.
    * ``delay``: ``delay_ms`` is added to everything sent, each way.
    * ``kafka-error`` (Kafka links only): requests of ``api_keys`` are answered with
      ``error_code`` (e.g. 16 NOT_COORDINATOR) instead of reaching the broker; with
      ``group_prefix``, only requests for consumer groups whose ids start with it (one run's
      groups, while another scenario's run beside it).
    * ``ack-lost`` (the MongoDB link only): the commands named in ``commands`` reach MongoDB,
      and their replies are dropped and the connections reset - one write in ``every`` of each
      database's, ``times`` in all (0: no limit); a retry of such a write gets its answer.

    ``broker`` (Kafka links only) narrows the rule to the link's connections to that node.
    """

    link: Link
    action: str
    delay_ms: int = 0
    api_keys: tuple[int, ...] = ()
    error_code: int = 0
    broker: int | None = None
    group_prefix: str = ""
    commands: tuple[str, ...] = ()
    every: int = 1
    times: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.link, Link):
            raise LinkRuleRefused(f"not a link: {self.link!r}")
        if self.action not in LINK_ACTIONS:
            raise LinkRuleRefused(
                f"unknown link fault {self.action!r} (choose from: {', '.join(LINK_ACTIONS)})"
            )
        if self.broker is not None and self.link not in KAFKA_LINKS:
            raise LinkRuleRefused(f"broker is for Kafka links; {self.link} is a MongoDB link")
        if self.action == "delay" and self.delay_ms <= 0:
            raise LinkRuleRefused(f"a delay needs delay_ms > 0, got {self.delay_ms}")
        if self.action != "delay" and self.delay_ms:
            raise LinkRuleRefused(f"delay_ms is for delays only, not {self.action}")
        if self.action == "ack-lost":
            if self.link in KAFKA_LINKS:
                raise LinkRuleRefused(f"ack-lost drops MongoDB's replies; {self.link} is Kafka's")
            if not self.commands or self.every < 1 or self.times < 0:
                raise LinkRuleRefused(
                    f"ack-lost needs commands, every >= 1 and times >= 0, got {self.commands}, "
                    f"{self.every}, {self.times}"
                )
        elif self.commands or self.every != 1 or self.times:
            raise LinkRuleRefused(f"commands, every and times are for ack-lost, not {self.action}")
        if self.action != "kafka-error":
            if self.api_keys or self.error_code or self.group_prefix:
                raise LinkRuleRefused(
                    f"api_keys, error_code and group_prefix are for kafka-error, not {self.action}"
                )
            return
        if self.link not in KAFKA_LINKS:
            raise LinkRuleRefused(
                f"a kafka-error rule needs a Kafka link; {self.link} is a MongoDB link "
                "(fail MongoDB commands with failCommand instead)"
            )
        if not self.api_keys or not set(self.api_keys) <= set(FAILABLE_APIS):
            raise LinkRuleRefused(
                f"kafka-error can fail APIs {[int(k) for k in FAILABLE_APIS]}, "
                f"got {list(self.api_keys)}"
            )
        if not (self.error_code and -(2**15) <= self.error_code < 2**15):
            raise LinkRuleRefused(f"error_code must be a non-zero int16, got {self.error_code}")


@dataclass(frozen=True)
class BackendAbilities:
    """What a backend can do to its servers, for refusing a scenario before anything starts."""

    name: str
    nodes: tuple[int, ...] | None  # the Kafka cluster's node ids (None: known once it runs)
    link_faults: bool  # a proxy on each link (network faults, Kafka commit errors)
    server_control: bool = True  # it started its servers: it can stop, kill, pause them
    test_commands: bool = True  # its MongoDB has test commands (failCommand)
    containers: bool = False  # its servers and consumers are containers (ContainerControl)
    postgres: bool = False  # it runs (or is given) a PostgreSQL for a CDC source
    postgres_link: bool = False  # a proxy on a CDC source's link to its PostgreSQL
    # A second environment of it can run beside the first on one machine: the matrix plays
    # the scenarios whose faults act on the environment there, beside the others.
    second: bool = False


class ContainerControl(ABC):
    """What a backend of containers can do to one container, by its server or client name
    (``kafka-2``, ``mongo``, a consumer's name from ``spawn_client``): the faults only
    containers make possible - a whole host frozen or cut from its network, its packets delayed
    or dropped by the kernel, a memory limit the kernel enforces."""

    @abstractmethod
    def kill(self, name: str) -> None:
        """SIGKILL the container's processes (the container stops)."""

    @abstractmethod
    def stop(self, name: str) -> None:
        """Stop the container (SIGTERM, then SIGKILL after the engine's grace period)."""

    @abstractmethod
    def start(self, name: str) -> None:
        """Start a stopped container again (same addresses, same published ports)."""

    @abstractmethod
    def pause(self, name: str) -> None:
        """Freeze every process of the container (the cgroup freezer)."""

    @abstractmethod
    def unpause(self, name: str) -> None: ...

    @abstractmethod
    def disconnect(self, name: str) -> None:
        """Take the container off the environment's network: nothing reaches it, it reaches
        nothing; its connections time out."""

    @abstractmethod
    def reconnect(self, name: str) -> None:
        """Put it back on the network under its name."""

    @abstractmethod
    def netem(self, name: str, rule: Sequence[str]) -> None:
        """Put ``tc qdisc ... netem RULE`` (e.g. ``delay 200ms``, ``loss 30%``) on the
        container's interface, in its own network namespace; an empty rule lifts it."""

    @abstractmethod
    def drop(self, name: str, percent: float) -> None:
        """Drop ``percent`` of the packets the container sends (0 lifts it)."""

    @abstractmethod
    def state(self, name: str) -> str:
        """The engine's word for it: running, paused, exited, ..."""


class BackendUnavailable(BadInput):
    """The backend cannot run on this machine (the message says why)."""


class EnvironmentBusy(BadInput):
    """The directory already holds a running environment."""


class NoEnvironment(LabError):
    """The directory holds no environment."""


class ServerStartError(LabError):
    """A server exited or did not become ready in time; the message ends with its log's tail."""


@dataclass(frozen=True)
class ServerStatus:
    name: str
    role: str
    address: str
    pid: int | None
    alive: bool
    paused: bool
    ready: bool
    log: str


@dataclass(frozen=True)
class KafkaStatus:
    """The cluster as its clients see it (None in a status when it does not answer)."""

    brokers: tuple[int, ...]  # registered and unfenced
    controller: int | None  # the KRaft quorum's leader
    under_replicated: int  # partitions whose in-sync replicas are fewer than their replicas
    coordinators: dict[str, int | None]  # consumer group -> the node coordinating it


@dataclass(frozen=True)
class EnvironmentStatus:
    backend: str
    directory: str
    env_id: str
    detached: bool
    owner_pid: int | None
    kafka_bootstrap: str
    mongo_uri: str
    spark_master: str
    servers: tuple[ServerStatus, ...]
    postgres_uri: str = ""  # once the environment runs PostgreSQL (a CDC source's database)
    kafka: KafkaStatus | None = None
    # Why the cluster did not answer the status's questions, when its nodes are up: a status
    # that cannot see the cluster is not a healthy one (else it reads "healthy" with no
    # cluster view, and the error is swallowed).
    kafka_error: str = ""

    @property
    def healthy(self) -> bool:
        servers_ok = all(s.alive and s.ready and not s.paused for s in self.servers)
        return servers_ok and not self.kafka_error

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "healthy": self.healthy}, indent=2)


class Environment(ABC):
    """Kafka, a MongoDB replica set and Spark, started together and stopped together.

    Use it as a context manager (``with open_environment(...) as env:``) or call ``start`` and
    ``stop``. Leaving the ``with`` block by any route - normal exit, an exception, Ctrl-C or
    SIGTERM - stops every server the environment started.
    """

    directory: Path

    @property
    @abstractmethod
    def abilities(self) -> BackendAbilities:
        """What this environment can do to its servers (a scenario it cannot play is refused)."""

    @property
    def backend(self) -> str:
        """The name of its backend."""
        return self.abilities.name

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run on this machine (None if it can)."""
        return None

    # -- lifecycle ---------------------------------------------------------------------------

    @abstractmethod
    def start(self, *, detach: bool = False) -> Self:
        """Start every server and wait until each is ready.

        ``detach`` leaves the servers running after this process exits (``chaoslab up``);
        otherwise this process owns them and a later start reaps them if it dies.
        """

    @abstractmethod
    def stop(self) -> None:
        """Stop every server this environment started. Safe to call twice."""

    @abstractmethod
    def status(self) -> EnvironmentStatus: ...

    def __enter__(self) -> Self:
        self._exit_stack = ExitStack()
        self._exit_stack.enter_context(stop_on_termination())
        try:
            return self.start()
        except BaseException:
            self._exit_stack.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        finally:
            self._exit_stack.close()

    # -- what clients use -------------------------------------------------------------------

    @property
    @abstractmethod
    def kafka_bootstrap(self) -> str:
        """``host:port[,host:port]`` of the Kafka brokers."""

    @property
    @abstractmethod
    def mongo_uri(self) -> str:
        """A MongoDB URI with the replica set named, so sessions and transactions work."""

    @property
    @abstractmethod
    def spark(self) -> SparkSettings:
        """How to build a Spark session against this environment (see ``spark_session``)."""

    def spark_on(self, cluster: SparkCluster, run_dir: Path | None = None) -> SparkSettings:
        """Session settings on ``cluster``, starting it if the environment can. ``run_dir``: the
        folder a run's executors write into (its crash plans' counts, its history), which they
        must see at the same path - a backend whose executors have filesystems of their own
        shares it with them."""
        if cluster is SparkCluster.LOCAL:
            return self.spark
        raise BackendUnavailable(f"the {self.backend} backend has no Spark {cluster} cluster")

    def postgres_uri(self) -> str:
        """The URI of the environment's PostgreSQL (logical decoding on), starting it if the
        environment can: only a CDC source's runs need it."""
        raise BackendUnavailable(f"the {self.backend} backend runs no PostgreSQL")

    def kafka_bootstrap_for(self, link: Link) -> str:
        """The address a client on ``link`` connects to; a fault proxy on the link changes it."""
        return self.kafka_bootstrap

    def mongo_uri_for(self, link: Link) -> str:
        """The URI a client on ``link`` connects with; a fault proxy on the link changes it."""
        return self.mongo_uri

    def postgres_uri_for(self, link: Link) -> str:
        """The URI of the environment's PostgreSQL for a client on ``link``; a fault proxy on
        the link changes it."""
        return self.postgres_uri()

    # -- what faults use ----------------------------------------------------------------------

    def add_link_rule(self, rule: LinkRule) -> str:
        """Put a network fault on a link; returns the rule's id. Several rules may be in force
        at once, on one link or several; each client of a link is affected, no other."""
        raise LinkRuleRefused(f"the {self.backend} backend has no fault proxies")

    def remove_link_rule(self, rule_id: str) -> int:
        """Lift a rule; returns how many times it acted (requests answered with an error,
        chunks held or delayed, connections reset)."""
        raise LinkRuleRefused(f"the {self.backend} backend has no fault proxies")

    def clear_link_rules(self) -> None:  # noqa: B027 - nothing to lift without proxies
        """Lift every link rule."""

    @property
    @abstractmethod
    def broker_ids(self) -> tuple[int, ...]:
        """The Kafka cluster's node ids; a rolling restart visits each in turn."""

    # Blocking operations, for people and tests. For Kafka, ``broker`` names a node id; None
    # means every node (stopped at once: a lone node of a three-voter quorum cannot finish a
    # controlled shutdown, and hangs: docs/environment.md).

    @abstractmethod
    def restart(
        self, component: Component, *, hard: bool = False, broker: int | None = None
    ) -> None:
        """Stop ``component`` (SIGTERM, or SIGKILL when ``hard``) and start it again on the
        same address, returning once it is ready."""

    @abstractmethod
    def kill(self, component: Component, *, broker: int | None = None) -> None:
        """SIGKILL ``component`` and leave it down until ``revive``."""

    @abstractmethod
    def revive(self, component: Component, *, broker: int | None = None) -> None:
        """Start a killed ``component`` again on the same address and wait until it is ready."""

    @abstractmethod
    def pause(self, component: Component, *, broker: int | None = None) -> None:
        """Freeze ``component`` (SIGSTOP): connections stay open, nothing answers."""

    @abstractmethod
    def resume(self, component: Component, *, broker: int | None = None) -> None:
        """Undo ``pause``."""

    def restart_broker(self, *, hard: bool = False, broker: int | None = None) -> None:
        self.restart(Component.KAFKA, hard=hard, broker=broker)

    def kill_broker(self, *, broker: int | None = None) -> None:
        self.kill(Component.KAFKA, broker=broker)

    def pause_broker(self, *, broker: int | None = None) -> None:
        self.pause(Component.KAFKA, broker=broker)

    def resume_broker(self, *, broker: int | None = None) -> None:
        self.resume(Component.KAFKA, broker=broker)

    # Steps on one Kafka node that return at once: the nemesis takes them between its polls
    # of the run (a node takes seconds to stop cleanly, and longer to start:
    # docs/performance.md), so the consumers' supervision goes on meanwhile.

    @abstractmethod
    def begin_stop_broker(self, broker: int, *, hard: bool) -> None:
        """Send the node SIGTERM (a controlled shutdown) or SIGKILL."""

    @abstractmethod
    def broker_stopped(self, broker: int) -> bool:
        """Whether the node's process has exited."""

    @abstractmethod
    def begin_start_broker(self, broker: int) -> None:
        """Start a stopped node again on its addresses (not waiting for it)."""

    @abstractmethod
    def broker_ready(self, broker: int) -> bool:
        """Whether the node is a registered, unfenced broker again."""

    def cluster_view(self) -> ClusterView:
        """Brokers, the active controller, leaders and ISRs, as the harness's client sees."""
        return cluster_view(self.kafka_bootstrap)

    def restart_mongo(self, *, hard: bool = False) -> None:
        self.restart(Component.MONGO, hard=hard)

    def kill_mongo(self) -> None:
        self.kill(Component.MONGO)

    def pause_mongo(self) -> None:
        self.pause(Component.MONGO)

    def resume_mongo(self) -> None:
        self.resume(Component.MONGO)

    # -- client processes (consumer runtimes) ------------------------------------------------

    @property
    @abstractmethod
    def env_id(self) -> str:
        """A name unique to this environment's life (also marks the processes it owns)."""

    def spawn_client(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: Path,
        extra_env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        image: str = "",
        reads: Sequence[Path] = (),
    ) -> ProcessHandle:
        """Start a client process (a consumer runtime) in its own session, tied to this
        environment: ``stop()``, and the orphan reaping of a later ``up``, stop it too. An
        ``image`` is for a backend of containers (``runnable`` refuses it elsewhere), and so are
        ``reads``: folders the process reads that its arguments do not name (a container is
        given them; a process here sees them anyway)."""
        if image:
            raise BadInput(f"the {self.backend} backend runs no container image ({image})")
        return process.spawn(
            argv, env_id=self.env_id, server=name, log_path=log_path, extra_env=extra_env, cwd=cwd
        )

    def client_exit_code(self, name: str, handle: ProcessHandle) -> int | None:
        """The exit status of a client started with ``spawn_client(name=...)`` that is no
        longer alive (negative: killed by that signal); None if it still runs."""
        return process.exit_code(handle)

    def signal_client(self, name: str, sig: int) -> int:
        """Send ``sig`` to every process of a client started with ``spawn_client(name=...)``,
        children included; returns how many received it."""
        return process.signal_server(self.env_id, name, sig)

    @property
    def containers(self) -> ContainerControl:
        """The container faults' handle on this environment's containers."""
        raise BackendUnavailable(f"the {self.backend} backend runs no containers")

    # -- logs ---------------------------------------------------------------------------------

    @abstractmethod
    def log_path(self, server: str) -> Path:
        """The log file of a server (names as in ``status().servers``)."""

    def log_tail(self, server: str, lines: int = 20) -> str:
        return tail(self.log_path(server), lines)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])
