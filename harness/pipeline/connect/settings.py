"""A Kafka Connect cluster as the lab runs and sees it: the workers' settings (one record,
handed to each worker's process as JSON) and Connect's REST API, the cluster's only interface
(Kafka's own system tests drive Connect the same way: ducktape's ``services/connect.py``).

A run's Connect lanes share one cluster of ``workers`` processes in distributed mode
(``harness.pipeline.connect.worker``), each a JVM of Apache Kafka's Connect runtime with
MongoDB's Kafka connector on its plugin path. Each lane is a connector on it. Each worker
writes the address its REST API listens on into the run's folder (``rest_url``): the lab asks
any worker that answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote, urlsplit

import requests

from harness.environment import jars
from harness.errors import LabError

# Connect's own names of the worker settings a scenario may set (pipeline.connect.worker), with
# what they must be; Connect's defaults unless set (docs/connect.md).
WORKER_SETTINGS = (
    "offset.flush.interval.ms",
    "offset.flush.timeout.ms",
    "scheduled.rebalance.max.delay.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "rebalance.timeout.ms",
    "task.shutdown.graceful.timeout.ms",
)
# Worker settings that are one of a few words, not milliseconds: KIP-618's exactly-once support
# for source connectors (a source's cluster: ``source.connect``).
WORKER_CHOICES = {"exactly.once.source.support": ("enabled", "disabled", "preparing")}
SINK_CONNECTOR = "com.mongodb.kafka.connect.MongoSinkConnector"
WORKERS = "workers"  # the scenario's own keys beside the worker settings
PLUGINS = "plugins"  # folders of the scenario's own connector plugins, beside its file
DEFAULT_WORKERS = 2
MAX_WORKERS = 4


def problems(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with a scenario's ``pipeline.connect`` (``workers`` and worker settings,
    Connect's names), each as (key, why)."""
    found = []
    for key, value in spec.items():
        if key == WORKERS:
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not 1 <= value <= MAX_WORKERS
            ):
                found.append((key, f"a whole number of workers, 1 to {MAX_WORKERS}; got {value!r}"))
        elif key == PLUGINS:
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                found.append((key, f"a list of folders of connector plugins; got {value!r}"))
        elif key in WORKER_CHOICES:
            if value not in WORKER_CHOICES[key]:
                found.append((key, f"one of {', '.join(WORKER_CHOICES[key])}; got {value!r}"))
        elif key not in WORKER_SETTINGS:
            passed = ", ".join([*WORKER_SETTINGS, *WORKER_CHOICES])
            found.append((key, f"not a worker setting the lab passes (those: {passed})"))
        elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
            found.append((key, f"milliseconds, a whole number >= 0; got {value!r}"))
    return found


def plugin_folders(spec: Mapping[str, Any], base: Path) -> tuple[Path, ...]:
    """The folders ``pipeline.connect.plugins`` names, relative to ``base`` (the scenario's
    folder) unless absolute."""
    return tuple((base / folder).resolve() for folder in spec.get(PLUGINS, ()))


def plugin_path(plugins: Sequence[str | Path], debezium: bool = False) -> str:
    """A worker's ``plugin.path``: MongoDB's connector (and Debezium's, for a CDC source's
    workers), then the scenario's own folders (each holds plugins, each plugin a folder or a jar
    with what it needs: Connect's layout). The lab's own are found where the worker runs: in a
    container, the image's."""
    own = [jars.mongo_kafka(), *([jars.debezium_postgres()] if debezium else [])]
    return ",".join([*(str(j.directory) for j in own), *map(str, plugins)])


def plugin_discovery(plugins: Sequence[str | Path]) -> str:
    """A worker's ``plugin.discovery``: the lab's own plugins carry complete ServiceLoader
    manifests (written at fetch, ``jars.PluginJarSet``), so a worker finds them without
    scanning their classes - most of its start; a scenario's own folders may lack them, and a
    plugin without them would not be found at all, so a worker with any of those scans."""
    return "only_scan" if plugins else "service_load"


# A task's consumer given or losing partitions (its consumer group's rebalances).
PARTITION_MOVES = (
    "Adding newly assigned partitions",
    "Revoke previously assigned partitions",
    "Lost previously assigned partitions",
)


def log_lines(connector: str) -> re.Pattern[str]:
    """The lines of a worker's log (``connect-log4j2.properties``'s layout) a lane records: its
    connector's warnings and errors (the threads of a connector say ``[NAME|task-N]``) and its
    tasks' partitions moving, the workers' own warnings and errors (no connector's), and the
    workers' rebalances - not other connectors'."""
    mine = re.escape(f"[{connector}|")
    return re.compile(
        rf"^\S+ (?:(?:WARN|ERROR) (?:{mine}|(?!\[[^\]\s]*\|))"
        r"|INFO \[Worker[^\]]*\] (?:Rebalance started|Joined group at generation)"
        rf"|INFO {mine}.*(?:{'|'.join(PARTITION_MOVES)}))"
    )


# A worker's log line on joining its group (connect-log4j2.properties's layout): when, and who
# leads it.
JOINED = re.compile(
    r"^(?P<t>\S+) INFO .*Joined group at generation .*leaderUrl='(?P<url>[^']*)'", re.M
)


class ConnectError(LabError):
    """A worker did not answer, or answered with an error the lab did not expect."""


@dataclass(frozen=True)
class ConnectSettings:
    """What every worker of a run's Connect cluster is started with."""

    bootstrap: str  # the consumers' link to Kafka (through the fault proxy)
    group: str  # the workers' group; the storage topics are named after it
    folder: str  # the run's Connect folder: worker settings, REST addresses, logs
    workers: int = 2
    worker: dict[str, Any] = field(default_factory=dict)  # WORKER_SETTINGS, Connect's names
    plugins: tuple[str, ...] = ()  # the scenario's own plugin folders, absolute
    debezium: bool = False  # Debezium's connector on the plugin path too (a CDC source's)

    @property
    def storage_topics(self) -> dict[str, str]:
        return {
            "config": f"{self.group}.configs",
            "offset": f"{self.group}.offsets",
            "status": f"{self.group}.status",
        }

    def rest_file(self, index: int) -> Path:
        """Where worker ``index`` writes the address its REST API listens on."""
        return Path(self.folder) / f"worker-{index}.rest"

    def worker_index(self, worker_id: str) -> int | None:
        """The index of the worker Connect calls ``worker_id`` (``host:port`` of its REST API)."""
        for index in range(self.workers):
            try:
                url = self.rest_file(index).read_text().strip()
            except FileNotFoundError:
                continue
            if urlsplit(url).netloc == worker_id:
                return index
        return None

    def log(self, index: int) -> Path:
        """Worker ``index``'s log (its supervisor's: ``connect-N.log`` in the folder)."""
        return Path(self.folder) / f"connect-{index}.log"

    def leader_index(self) -> int | None:
        """The worker that leads the workers' group now, as the last rebalance any worker
        logged says (``Joined group at generation N ... leaderUrl='http://HOST:PORT/'``)."""
        latest: tuple[str, str] | None = None  # (the line's time, the leader's URL)
        for text in self._logs():
            for found in JOINED.finditer(text):
                if latest is None or found["t"] > latest[0]:
                    latest = (found["t"], found["url"])
        if latest is None:
            return None
        return self.worker_index(urlsplit(latest[1]).netloc)

    def joined(self) -> int:
        """How many of the workers have logged joining the workers' group (``JOINED``)."""
        return sum(bool(JOINED.search(text)) for text in self._logs())

    def _logs(self) -> Iterator[str]:
        """The text of each worker's log that exists yet."""
        for index in range(self.workers):
            try:
                yield self.log(index).read_text(errors="replace")
            except FileNotFoundError:
                continue

    def rest_urls(self) -> list[str]:
        """The REST addresses the workers wrote (a restarted worker writes its new one)."""
        found = []
        for index in range(self.workers):
            try:
                found.append(self.rest_file(index).read_text().strip())
            except FileNotFoundError:
                continue
        return [url for url in found if url]

    @classmethod
    def for_run(
        cls, spec: Mapping[str, Any], *, bootstrap: str, group: str, folder: Path, base: Path
    ) -> Self:
        """A run's cluster: ``spec`` is the scenario's ``pipeline.connect`` (checked), ``base``
        the scenario's folder."""
        folder.mkdir(parents=True, exist_ok=True)
        worker = {k: v for k, v in spec.items() if k not in (WORKERS, PLUGINS)}
        workers = int(spec.get(WORKERS, DEFAULT_WORKERS))
        plugins = tuple(map(str, plugin_folders(spec, base)))
        return cls(bootstrap, group, str(folder.absolute()), workers, worker, plugins)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Self:
        raw = json.loads(text)
        return cls(**{**raw, "plugins": tuple(raw.get("plugins", ()))})


@dataclass(frozen=True)
class TaskState:
    """A task of a connector as Connect's status says it (RUNNING, UNASSIGNED, FAILED...)."""

    task: int
    state: str
    worker: str
    trace: str = ""  # a failed task's stack trace

    @property
    def reason(self) -> str:
        """A failed task's first line (the exception that ended it) and, if it has one, its
        root cause's (Connect's own exceptions wrap the one that says what went wrong)."""
        lines = [line.strip() for line in self.trace.strip().splitlines()]
        if not lines:
            return ""
        causes = [
            line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by:")
        ]
        return lines[0] + (f" (caused by {causes[-1]})" if causes else "")


@dataclass(frozen=True)
class ConnectorState:
    name: str
    state: str  # the connector's own
    worker: str
    tasks: tuple[TaskState, ...]


class ConnectRest:
    """Connect's REST API, asked of whichever worker answers first."""

    def __init__(self, settings: ConnectSettings, *, timeout: float = 10.0) -> None:
        self.settings = settings
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        urls = self.settings.rest_urls()
        if not urls:
            raise ConnectError("no Connect worker has said where its REST API listens yet")
        failures = []
        for url in urls:
            try:
                response = requests.request(
                    method, f"{url.rstrip('/')}{path}", json=body, timeout=self.timeout
                )
                return response.status_code, response.json() if response.content else None
            except (requests.RequestException, ValueError) as exc:
                failures.append(f"{url}: {exc}")
        raise ConnectError(f"no Connect worker answered {method} {path}: {'; '.join(failures)}")

    def plugins(self) -> list[str]:
        """The connector classes the workers have (their plugin path's)."""
        status, payload = self._call("GET", "/connector-plugins")
        _expect(status, payload, "list the connector plugins")
        return [str(p.get("class", "")) for p in payload or []]

    def validate(self, connector_class: str, config: dict[str, str]) -> list[str]:
        """Connect's own validation of a connector config: each problem as ``key: message``
        (none: Connect takes it)."""
        path = f"/connector-plugins/{quote(connector_class, safe='')}/config/validate"
        status, payload = self._call("PUT", path, config)
        if status == 400 and isinstance(payload, dict):
            return [str(payload.get("message", payload))]
        _expect(status, payload, f"validate a {connector_class} config")
        problems = []
        for entry in (payload or {}).get("configs", []):
            value = entry.get("value", {})
            for error in value.get("errors", []):
                problems.append(f"{value.get('name')}: {error}")
        return problems

    def put_config(self, name: str, config: dict[str, str]) -> None:
        """Create or update connector ``name``."""
        status, payload = self._call("PUT", f"/connectors/{quote(name, safe='')}/config", config)
        _expect(status, payload, f"create connector {name}")

    def status(self, name: str) -> ConnectorState | None:
        """A connector's state and its tasks' (None: Connect has no status for it yet)."""
        status, payload = self._call("GET", f"/connectors/{quote(name, safe='')}/status")
        if status == 404:
            return None
        _expect(status, payload, f"read connector {name}'s status")
        connector = payload.get("connector", {})
        tasks = tuple(
            TaskState(int(t["id"]), str(t["state"]), str(t.get("worker_id", "")),
                      str(t.get("trace", "")))
            for t in payload.get("tasks", [])
        )  # fmt: skip
        return ConnectorState(
            name, str(connector.get("state", "")), str(connector.get("worker_id", "")), tasks
        )

    def restart_task(self, name: str, task: int) -> None:
        status, payload = self._call(
            "POST", f"/connectors/{quote(name, safe='')}/tasks/{task}/restart"
        )
        _expect(status, payload, f"restart task {task} of connector {name}")

    def stop(self, name: str) -> None:
        """Connector ``name`` STOPPED: its tasks shut down and their offsets committed, its
        config kept (Connect's own maintenance stop, KIP-875)."""
        status, payload = self._call("PUT", f"/connectors/{quote(name, safe='')}/stop")
        _expect(status, payload, f"stop connector {name}")

    def resume(self, name: str) -> None:
        """A STOPPED or PAUSED connector ``name`` running again."""
        status, payload = self._call("PUT", f"/connectors/{quote(name, safe='')}/resume")
        _expect(status, payload, f"resume connector {name}")

    def delete(self, name: str) -> None:
        status, payload = self._call("DELETE", f"/connectors/{quote(name, safe='')}")
        if status != 404:
            _expect(status, payload, f"delete connector {name}")


def _expect(status: int, payload: Any, what: str) -> None:
    if status >= 300:
        message = payload.get("message", payload) if isinstance(payload, dict) else payload
        raise ConnectError(f"Connect refused to {what}: {status} {message}")
