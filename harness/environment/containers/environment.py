"""The containers backend: the lab's servers and consumers in containers on a private network,
started with testcontainers on whichever engine answers (``engine``), from images built here
(``images``), as ``specs`` lays them out.

What it shares with the environments of processes (``ProcessEnvironment``): the directory's
claim and state file, the ports picked once at ``up`` (published on 127.0.0.1 and kept across a
container's restarts), the fault proxy's control, orphan reaping. What differs: a server is a
container, stopped, killed, paused and started again through the engine; every container and
the network carry the label ``chaoslab.env=<id>``, and ``down``, a failed ``up`` and the next
``up`` after a harness was SIGKILLed remove what carries an id no live environment owns (Ryuk,
testcontainers' own reaper, cannot be pulled here).
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import EndpointConfig, IPAMConfig, IPAMPool
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from harness.environment import process, state
from harness.environment.base import (
    BackendUnavailable,
    Component,
    EnvironmentStatus,
    KafkaStatus,
    Link,
    NoEnvironment,
    ServerStartError,
    ServerStatus,
)
from harness.environment.containers import engine as engines
from harness.environment.containers import images
from harness.environment.containers.control import EngineContainers
from harness.environment.containers.specs import (
    CLIENT_RANGE,
    HOSTS,
    LABEL_ENV,
    LABEL_SERVER,
    SPARK_WORKER_UI,
    ContainerSpec,
    Mount,
    Topology,
    port_names,
    supervised,
)
from harness.environment.options import CONTAINERS_ABILITIES, ContainersOptions
from harness.environment.process_environment import ProcessEnvironment
from harness.environment.servers import postgres
from harness.environment.servers.base import LocalServer, ServerContext
from harness.environment.servers.kafka import LOG4J2, NODE_IDS, broker_registered
from harness.environment.servers.mongo import writable_primary
from harness.environment.servers.proxy import FaultProxy
from harness.environment.servers.spark_standalone import master_alive, worker_registered
from harness.environment.spark import WORKERS, SparkCluster, SparkSettings
from harness.errors import BadInput
from harness.kafka.clients import await_group_coordinator
from harness.readiness import DeadlineExceeded, GaveUp, accepts_connections, wait_for

ENGINE_FILE = "engine.json"
SPARK_NAMES = ("master", *(f"worker-{n}" for n in WORKERS))
KAFKA_READY_S = 180.0  # three JVMs starting together on 2 busy cores
# Spark's: the local backend's master and workers take 60 s each, one at a time.
READY_S = {
    "mongo": 60.0, "proxy": 30.0, "postgres": 60.0, **{f"spark-{n}": 90.0 for n in SPARK_NAMES}
}  # fmt: skip
STOP_TIMEOUT_S = 30  # a margin over a Kafka node's controlled shutdown (docs/performance.md)
REMOVE_TIMEOUT_S = 60.0
SUBNET_TRIES = 10
EXITED = ("exited", "stopped", "dead", "created", "configured")


class ContainersEnvironment(ProcessEnvironment[ContainersOptions]):
    abilities = CONTAINERS_ABILITIES

    @classmethod
    def unavailable(cls) -> str | None:
        problem = engines.engine_problem()
        return f"the containers backend cannot run here: {problem}" if problem else None

    options_type = ContainersOptions

    def _port_names(self) -> Sequence[str]:
        return port_names()

    def _servers(self) -> list[LocalServer]:
        return []  # servers are containers here (``_specs``)

    # -- the engine and the layout ----------------------------------------------------------------

    def _engine_record(self) -> dict[str, Any]:
        """``{"engine": ..., "image": ...}``: what ``up`` found and built, for later commands."""
        path = self.directory / ENGINE_FILE
        if not path.exists():
            raise NoEnvironment(f"no containers environment in {self.directory}")
        found: dict[str, Any] = json.loads(path.read_text())
        return found

    def _save_engine_record(
        self, engine: engines.Engine, image: str = "", subnet: str = ""
    ) -> None:
        record = {"engine": asdict(engine), "image": image, "subnet": subnet}
        (self.directory / ENGINE_FILE).write_text(json.dumps(record))

    @property
    def engine(self) -> engines.Engine:
        return engines.Engine(**self._engine_record()["engine"])

    def _topology(self) -> Topology:
        st, record = self._st, self._engine_record()
        return Topology(self.directory, st.ports, st.env_id, record["image"], record["subnet"])

    def address(self, server: str) -> str:
        """A server's fixed address on the environment's network."""
        return self._topology().ip(server)

    def _container_name(self, server: str) -> str:
        return f"chaoslab-{self._st.env_id}-{server}"

    @property
    def _network_name(self) -> str:
        return f"chaoslab-{self._st.env_id}"

    def _labels(self, server: str) -> dict[str, str]:
        return {LABEL_ENV: self._st.env_id, LABEL_SERVER: server}

    @functools.cached_property
    def _docker(self) -> docker.DockerClient:
        """One client for this environment object's calls (each opens a connection pool)."""
        return self.engine.client()

    def _get(self, server: str) -> Container:
        return self._docker.containers.get(self._container_name(server))

    # -- starting ---------------------------------------------------------------------------------

    def _start_servers(self) -> None:
        st = self._st
        engine = engines.find_or_start(self.directory, st.env_id)
        self._progress(f"  {'engine':<14} {engine.kind:<34} {engine.base_url}")
        self._save_engine_record(engine)
        remove_strays(engine, self._progress)
        ref = images.build_lab(engine, self._progress)
        subnet = self._create_network(engine)
        self._save_engine_record(engine, ref.tag, subnet)
        self._prepare_files()
        topology = self._topology()
        mongo, proxy, *nodes = topology.servers()
        started = time.monotonic()
        for spec in (mongo, proxy, *nodes):  # the nodes together: one alone has no quorum
            self._run(spec)
        self._await(mongo, started)
        self._await(proxy, started)
        for node in nodes:
            self._await(node, started)
        await_group_coordinator(self.kafka_bootstrap)
        self._progress(f"  {'groups':<14} {'__consumer_offsets made':<34} {'':<16} "
                       f"{time.monotonic() - started:5.1f}s")  # fmt: skip
        if self.options.spark_standalone:
            self._spark_cluster_sharing(())
        if self.options.postgres:
            self._start_postgres()

    def _create_network(self, engine: engines.Engine) -> str:
        """The environment's network on a free subnet; returns its first three octets. Another
        environment starting at the same time may take the subnet found free first (measured:
        two test workers' ``up``s, "subnet 10.89.100.0/24 is already used on the host"): then
        the next one is tried."""
        taken: set[str] = set()
        while True:
            subnet = free_subnet(engine, taken)
            ipam = IPAMConfig(pool_configs=[IPAMPool(
                subnet=f"{subnet}.0/24", iprange=f"{subnet}.{CLIENT_RANGE}/25",
                gateway=f"{subnet}.1",
            )])  # fmt: skip
            settings = {"labels": self._labels("network"), "ipam": ipam}
            network = Network(docker_client_kw=engine.client_kw(), docker_network_kw=settings)
            network.name = self._network_name  # testcontainers names it by a uuid otherwise
            try:
                network.create()
            except docker.errors.APIError as exc:
                if "already used" not in str(exc) or len(taken) >= SUBNET_TRIES:
                    raise
                taken.add(subnet)
                continue
            return subnet

    def _prepare_files(self) -> None:
        for folder in ("logs", "mongo", "kafka"):
            (self.directory / folder).mkdir(parents=True, exist_ok=True)
        (self.directory / "secantusd.toml").write_text("# chaoslab: settings on the command line\n")
        shutil.copy(LOG4J2, self.directory / "kafka" / "log4j2.properties")
        topology = self._topology()
        for node in NODE_IDS:
            (self.directory / "kafka" / f"node-{node}").mkdir(exist_ok=True)
            lines = [f"{k}={v}" for k, v in topology.kafka_settings(node).items()]
            topology.kafka_config(node).write_text(
                "# written by chaoslab\n" + "\n".join(lines) + "\n"
            )
        self.spark.prepare()

    def _container(self, spec: ContainerSpec) -> DockerContainer:
        engines.configure_testcontainers()  # in every process: ``run --env`` starts consumers
        engine = self.engine
        network = Network(docker_client_kw=engine.client_kw())
        network.name = self._network_name
        container = (
            DockerContainer(spec.image, docker_client_kw=engine.client_kw())
            .with_name(self._container_name(spec.name))
            .with_network(network)
            .with_network_aliases(spec.name)
            .with_command(list(spec.command))
            .with_envs(**spec.env)
            .with_kwargs(
                labels=self._labels(spec.name),
                cap_add=list(spec.cap_add) or None,
                stop_signal=spec.stop_signal,
                # Its own, for the fixed address (testcontainers' sets the aliases only).
                networking_config={
                    network.name: EndpointConfig(
                        self._docker.api.api_version, aliases=[spec.name], ipv4_address=spec.address
                    )
                },
            )
        )
        for mount in spec.mounts:
            container.with_volume_mapping(mount.host, mount.container, mount.mode)
        for inside, outside in spec.published.items():
            # On 127.0.0.1 only: testcontainers' with_bind_ports publishes on every interface.
            container.ports[f"{inside}/tcp"] = ("127.0.0.1", outside)  # type: ignore[assignment]
        return container

    def _run(self, spec: ContainerSpec) -> None:
        self._container(spec).start()
        self._record(spec.name, paused=False)

    def _await(self, spec: ContainerSpec, started: float) -> None:
        def exited() -> str | None:
            status = self._get(spec.name).status
            return f"the container is {status}" if status in EXITED else None

        timeout = READY_S.get(spec.name, KAFKA_READY_S)
        try:
            wait_for(lambda: self._probe(spec.name), what=f"{spec.role} ({spec.name})",
                     timeout=timeout, abort=exited)  # fmt: skip
        except (DeadlineExceeded, GaveUp) as exc:
            raise ServerStartError(
                f"{exc}\n--- last lines of {self.log_path(spec.name)} ---\n"
                f"{self.log_tail(spec.name)}"
            ) from None
        took = time.monotonic() - started
        address = where(spec)
        self._progress(f"  {spec.name:<14} {spec.role:<34} {address:<16} {took:5.1f}s")

    def _probe(self, server: str) -> None:
        ports = self._st.ports
        if server == "mongo":
            accepts_connections("127.0.0.1", ports["mongo"])
            writable_primary(self.mongo_uri)
        elif server == "proxy":
            self._proxy.probe()
        elif server.startswith("kafka-"):
            # The proxy listens for a node only while the node accepts connections: asked
            # first, since librdkafka logs every refusal.
            accepts_connections("127.0.0.1", ports[f"{server}-proxy"])
            own = f"127.0.0.1:{ports[f'{server}-proxy']}"  # not the others': not yet up, maybe
            broker_registered(int(server.split("-")[1]), own)
        elif server == "postgres":
            postgres.probe(self._topology().postgres_uri, f"127.0.0.1:{ports['postgres']}")
        elif server == "spark-master":
            master_alive(ports["spark-master-ui"])
        elif server.startswith("spark-worker-"):
            index = int(server.rsplit("-", 1)[1])
            ui = f"{self._topology().ip(server)}:{SPARK_WORKER_UI}"
            worker_registered(ports["spark-master-ui"], ui, index)
        else:
            raise KeyError(server)

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self) -> None:
        try:
            found = self._reload()
        except NoEnvironment:
            return
        removed = 0
        try:
            removed = remove_labelled(self.engine, found.env_id)
        except Exception as exc:  # the engine is gone (a SIGKILLed harness): the next up cleans
            self._progress(f"could not remove the containers: {exc}")
        pids = process.reap(found.env_id, grace=10.0)  # the podman service, clients' leftovers
        with state.locked(self.directory):
            state.remove(self.directory)
            state.unregister(found.env_id)
            self._wipe_data()
            (self.directory / ENGINE_FILE).unlink(missing_ok=True)
        self._progress(
            f"removed {removed} containers and stopped {len(pids)} processes; the environment "
            f"in {self.directory} is down"
        )

    # -- what clients use -------------------------------------------------------------------------

    @property
    def _proxy(self) -> FaultProxy:
        # The proxy runs in its container; this is its control client and rule mapping.
        ctx = ServerContext(self.directory, {**self._st.ports, "mongo-proxy": 0}, self.env_id)
        return FaultProxy(ctx, kafka={n: f"kafka-{n}" for n in NODE_IDS}, mongo="mongo")

    @property
    def kafka_bootstrap(self) -> str:
        return self._topology().kafka_bootstrap

    @property
    def mongo_uri(self) -> str:
        return self._topology().mongo_uri

    def kafka_bootstrap_for(self, link: Link) -> str:
        if link is Link.CONSUMER_KAFKA:  # the consumers run in containers
            return self._topology().network_kafka_bootstrap
        return self.kafka_bootstrap

    def mongo_uri_for(self, link: Link) -> str:
        if link is Link.CONSUMER_MONGO:
            return self._topology().network_mongo_uri
        return self.mongo_uri

    def postgres_uri(self) -> str:
        """PostgreSQL's published port, its container started first if a run is the first to
        ask (one start at a time: runs side by side ask at once)."""
        self._on_demand("postgres", self._start_postgres)
        return self._topology().postgres_uri

    def postgres_uri_for(self, link: Link) -> str:
        uri = self.postgres_uri()
        # A CDC source's Connect workers run in containers: the proxy's address on the network.
        return self._topology().network_postgres_uri if link is Link.SOURCE_POSTGRES else uri

    def _start_postgres(self) -> None:
        self._needs_port("postgres", "PostgreSQL")
        self._progress("starting PostgreSQL (a CDC source's database)")
        spec = self._topology().postgres()

        def start() -> None:
            self._remove_container(spec.name)
            self._run(spec)
            self._await(spec, time.monotonic())

        self._start_later("postgres", start, undo=lambda: self._remove_container(spec.name))

    @property
    def spark(self) -> SparkSettings:
        cluster = SparkCluster.STANDALONE if self.options.spark_standalone else SparkCluster.LOCAL
        return self._spark_settings(cluster)

    def _spark_settings(self, cluster: SparkCluster) -> SparkSettings:
        # For drivers in the consumers' containers: the image's interpreter.
        if cluster is SparkCluster.STANDALONE:
            master = self._topology().spark_master_url
        else:
            master = f"local[{self.options.spark_cores}]"
        settings = SparkSettings.for_directory(self.directory, master)
        return replace(settings, python=images.IMAGE_PYTHON)

    def spark_on(self, cluster: SparkCluster, run_dir: Path | None = None) -> SparkSettings:
        if cluster is SparkCluster.STANDALONE:
            self._spark_cluster_sharing(() if run_dir is None else (str(run_dir),))
        return self._spark_settings(cluster)

    def _spark_cluster_sharing(self, shared: tuple[str, ...]) -> None:
        """The standalone cluster, running, its workers with ``shared`` mounted: started if it
        is not, its workers started again (new containers) if they lack a folder - a mount
        cannot be added to a running container."""
        master, *workers = self._topology().spark_cluster(shared)
        if self.containers.state(master.name) != "running":
            due = [master, *workers]
        else:
            due = [w for w in workers if not self._runs_with_mounts(w)]
        if not due:
            return
        self._progress(f"starting the Spark standalone cluster ({', '.join(s.name for s in due)})")
        started = time.monotonic()
        try:
            for spec in due:
                self._remove_container(spec.name)
                self._run(spec)
            for spec in due:
                self._await(spec, started)
        except BaseException:
            for spec in due:
                self._remove_container(spec.name)
            raise

    def _runs_with_mounts(self, spec: ContainerSpec) -> bool:
        try:
            container = self._get(spec.name)
        except docker.errors.NotFound:
            return False
        mounted = {m.get("Destination") for m in container.attrs.get("Mounts") or []}
        return container.status == "running" and all(m.container in mounted for m in spec.mounts)

    # -- consumers --------------------------------------------------------------------------------

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
    ) -> process.ProcessHandle:
        """The consumer in a container of its own on the network, of the lab's image or the
        ``image`` a command consumer names (one the engine has: it is never pulled; it needs
        ``sh`` and ``setsid``). Its processes carry the environment's marker like the local
        backend's, so ``signal_client`` reaches them from this machine (a rootful engine's
        containers are processes of this machine). The
        folders its arguments name (``cwd``, relative ones under it) and ``reads`` are mounted at
        their own paths."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # This machine's Python is the lab's image's; a user's image has its own programs.
        ours = images.IMAGE_PYTHON if not image else sys.executable
        command = [ours if a == sys.executable else a for a in argv]
        folders = {str(self.directory), str(log_path.parent)}
        named = [cwd / a if cwd is not None else Path(a) for a in argv[1:]]
        folders |= {str(p.resolve().parent) for p in named if p.is_absolute() and p.exists()}
        if cwd is not None:
            folders.add(str(cwd.resolve()))
        folders |= {str(p.resolve()) for p in reads}
        spec = ContainerSpec(
            name,
            "consumer",
            image or self._topology().image,
            supervised(command, log_path, cwd),
            env={**(extra_env or {}), process.ENV_ID_VAR: self.env_id, process.SERVER_VAR: name},
            mounts=tuple(Mount(f, f) for f in sorted(folders)),
        )
        self._remove_container(name)  # the same consumer's last container, exited
        try:
            container = self._container(spec).start()
        except docker.errors.ImageNotFound:
            raise ServerStartError(
                f"consumer {name}: the engine has no image {spec.image!r} (the lab never pulls "
                "one: build or load it into the engine first)"
            ) from None
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        pid = int(wrapped.attrs["State"]["Pid"])
        if pid == 0:  # exited already: its exit status is read like any other's
            raise ServerStartError(f"consumer {name} exited at once:\n{self.log_tail(name)}")
        return process.handle_of(pid)

    def client_exit_code(self, name: str, handle: process.ProcessHandle) -> int | None:
        """The exit status of a consumer's container (negative: killed by that signal)."""
        try:
            container = self._get(name)
            result = container.wait(timeout=30)
        except docker.errors.NotFound:
            return None
        code = int(result.get("StatusCode", 0))
        return -(code - 128) if code > 128 else code

    def _remove_container(self, server: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self._get(server).remove(force=True)

    # -- what faults use --------------------------------------------------------------------------

    @property
    def containers(self) -> EngineContainers:
        topology = self._topology()
        addresses = {name: topology.ip(name) for name in HOSTS}
        return EngineContainers(lambda: self._docker, self.env_id, self._network_name, addresses)

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return NODE_IDS

    def _targets(self, component: Component, broker: int | None) -> list[str]:
        if component is Component.MONGO:
            return ["mongo"]
        if component is Component.POSTGRES:
            return ["postgres"]
        if broker is None:
            return [f"kafka-{n}" for n in NODE_IDS]
        if broker not in NODE_IDS:
            raise BadInput(f"the Kafka cluster's nodes are {list(NODE_IDS)}; there is no {broker}")
        return [f"kafka-{broker}"]

    def _spec(self, server: str) -> ContainerSpec:
        topology = self._topology()
        return next(s for s in [*topology.servers(), topology.postgres()] if s.name == server)

    def _stop(self, servers: Sequence[str], *, hard: bool) -> None:
        for server in servers:
            container = self._get(server)
            if container.status == "paused":
                container.unpause()
            if container.status in EXITED:
                continue
            if hard:
                container.kill()
            else:
                container.stop(timeout=STOP_TIMEOUT_S)
        for server in servers:
            self._get(server).wait(timeout=STOP_TIMEOUT_S + 10)
            self._record(server, paused=False)

    def _start_again(self, servers: Sequence[str]) -> None:
        started = time.monotonic()
        for server in servers:
            self._get(server).start()
        for server in servers:
            self._await(self._spec(server), started)

    def restart(
        self, component: Component, *, hard: bool = False, broker: int | None = None
    ) -> None:
        servers = self._targets(component, broker)
        self._stop(servers, hard=hard)
        self._start_again(servers)

    def kill(self, component: Component, *, broker: int | None = None) -> None:
        self._stop(self._targets(component, broker), hard=True)

    def revive(self, component: Component, *, broker: int | None = None) -> None:
        servers = self._targets(component, broker)
        running = [s for s in servers if self._get(s).status not in EXITED]
        if running:
            raise BadInput(f"{', '.join(running)}: running; only a killed server can be revived")
        self._start_again(servers)

    def pause(self, component: Component, *, broker: int | None = None) -> None:
        for server in self._targets(component, broker):
            self._get(server).pause()  # the cgroup freezer: every process of the container
            self._record(server, paused=True)

    def resume(self, component: Component, *, broker: int | None = None) -> None:
        for server in self._targets(component, broker):
            self._get(server).unpause()
            self._record(server, paused=False)

    def begin_stop_broker(self, broker: int, *, hard: bool) -> None:
        (server,) = self._targets(Component.KAFKA, broker)
        container = self._get(server)
        if container.status == "paused":
            container.unpause()
        container.kill(signal="SIGKILL" if hard else "SIGTERM")

    def broker_stopped(self, broker: int) -> bool:
        (server,) = self._targets(Component.KAFKA, broker)
        return self._get(server).status in EXITED

    def begin_start_broker(self, broker: int) -> None:
        (server,) = self._targets(Component.KAFKA, broker)
        self._get(server).start()
        self._record(server, paused=False)

    def broker_ready(self, broker: int) -> bool:
        try:
            self._probe(f"kafka-{broker}")
        except Exception:
            return False
        return True

    # -- status -----------------------------------------------------------------------------------

    def status(self) -> EnvironmentStatus:
        found = self._reload()
        servers = []
        topology = self._topology()
        on_demand = [*topology.spark_cluster(), topology.postgres()]
        for spec in [*topology.servers(), *on_demand]:
            try:
                container = self._get(spec.name)
                running, paused = container.status == "running", container.status == "paused"
                pid = int(container.attrs["State"]["Pid"]) or None
            except docker.errors.NotFound:
                if spec in on_demand:
                    continue  # started when a scenario first asks for it
                running, paused, pid = False, False, None
            address = where(spec)
            servers.append(
                ServerStatus(
                    name=spec.name,
                    role=spec.role,
                    address=address,
                    pid=pid,
                    alive=running or paused,
                    paused=paused,
                    ready=running and _answers(lambda s=spec.name: self._probe(s)),
                    log=str(self.log_path(spec.name)),
                )
            )
        return self._status_of(found, servers)

    def _kafka_status(self, servers: Sequence[ServerStatus]) -> tuple[KafkaStatus | None, str]:
        if not any(s.ready for s in servers if s.name.startswith("kafka-")):
            return None, ""
        return super()._kafka_status(servers)


def where(spec: ContainerSpec) -> str:
    """Where people reach a server: its first published port, else its network address."""
    return next((f"127.0.0.1:{p}" for p in spec.published.values()), spec.address or spec.name)


def _answers(probe: Any) -> bool:
    try:
        probe()
    except Exception:
        return False
    return True


# -- cleaning up by label --------------------------------------------------------------------------


def remove_labelled(engine: engines.Engine, env_id: str | None = None) -> int:
    """Remove every container and network labelled with ``env_id`` (any lab id when None);
    returns how many containers were removed."""
    selector = f"{LABEL_ENV}={env_id}" if env_id else LABEL_ENV
    client = engine.client(timeout=int(REMOVE_TIMEOUT_S))
    try:
        containers = client.containers.list(all=True, filters={"label": selector})
        for container in containers:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        for network in client.networks.list(filters={"label": selector}):
            with contextlib.suppress(docker.errors.NotFound):
                network.remove()
    finally:
        client.close()
    return len(containers)


def free_subnet(engine: engines.Engine, taken: set[str] | None = None) -> str:
    """``10.89.N`` for a ``/24`` no network of the engine uses (the lab's take N >= 100), nor
    one in ``taken``."""
    client = engine.client()
    try:
        used = {
            str(c.get("Subnet", ""))
            for n in client.networks.list()
            for c in (n.attrs.get("IPAM") or {}).get("Config") or []
        }
    finally:
        client.close()
    for n in range(100, 255):
        if f"10.89.{n}.0/24" not in used and f"10.89.{n}" not in (taken or set()):
            return f"10.89.{n}"
    raise BackendUnavailable("no free 10.89.N.0/24 subnet for the environment's network")


def live_env_ids() -> set[str]:
    """The ids of the environments someone still owns (running, or detached by ``up``)."""
    alive = set()
    for env_id, directory in state.registered():
        found = state.load(directory)
        if found is not None and found.env_id == env_id and not found.orphaned():
            alive.add(env_id)
    return alive


def remove_strays(engine: engines.Engine, progress: Any) -> int:
    """Remove containers and networks of environments nobody owns any more (a harness that was
    SIGKILLed could not); returns how many containers."""
    client = engine.client(timeout=int(REMOVE_TIMEOUT_S))
    try:
        labelled = client.containers.list(all=True, filters={"label": LABEL_ENV})
        networks = client.networks.list(filters={"label": LABEL_ENV})
    finally:
        client.close()
    owners = {c.labels.get(LABEL_ENV) for c in labelled} | {
        n.attrs.get("Labels", {}).get(LABEL_ENV) for n in networks
    }
    alive = live_env_ids()
    removed = 0
    for env_id in sorted(o for o in owners if o and o not in alive):
        removed += remove_labelled(engine, env_id)
    if removed:
        progress(f"removed {removed} containers left by environments nobody owns any more")
    return removed
