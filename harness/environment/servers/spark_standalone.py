"""A Spark standalone cluster (one master, two workers) as separate processes, so that losing
an executor or a worker can be a fault: a task lost with its executor is retried on the other
worker. Started at ``up --spark-standalone`` or when a scenario first asks for it
(``pipeline.spark_cluster: standalone``); without it, sessions run ``local[N]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests

from harness.environment.ports import LOOPBACK
from harness.environment.servers.base import LocalServer, ServerContext
from harness.readiness import NotReady


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _spark_env() -> dict[str, str]:
    # SPARK_LOCAL_IP also decides where the web UIs bind: without it they listen on 0.0.0.0.
    return {"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": LOOPBACK}


def _master_json(ui_port: int) -> dict[str, Any]:
    response = requests.get(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2)
    response.raise_for_status()
    master: dict[str, Any] = response.json()
    return master


def master_alive(ui_port: int) -> None:
    """Raises ``NotReady`` unless the master whose web UI is on ``ui_port`` here is ALIVE."""
    status = _master_json(ui_port).get("status")
    if status != "ALIVE":
        raise NotReady(f"master status {status}")


def worker_registered(ui_port: int, worker_ui: str, index: int) -> None:
    """Raises ``NotReady`` unless the worker whose web UI is at ``worker_ui`` (``host:port``)
    is ALIVE among the workers of the master whose UI is on ``ui_port`` here."""
    workers = _master_json(ui_port).get("workers", [])
    alive = (w for w in workers if w.get("state") == "ALIVE")
    if not any(worker_ui in w.get("webuiaddress", "") for w in alive):
        raise NotReady(f"worker {index} has not registered with the master yet")


class SparkMaster(LocalServer):
    name = "spark-master"
    role = "Spark standalone master"
    ready_timeout = 60.0

    @property
    def url(self) -> str:
        return f"spark://{self.address}"

    @property
    def ui_port(self) -> int:
        return self.ctx.ports["spark-master-ui"]

    def argv(self) -> list[str]:
        return [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        ]

    def extra_env(self) -> dict[str, str]:
        return _spark_env()

    def probe(self) -> None:
        master_alive(self.ui_port)


# Each worker offers slots for eight single-core executors of 512 MiB (``spark.STANDALONE_APP``):
# several variants' drivers at once, on a two-core machine.
WORKER_CORES = 8
WORKER_MEMORY = "4g"


def worker_ui_port_name(index: int) -> str:
    return f"spark-worker-{index}-ui"


class SparkWorker(LocalServer):
    role = "Spark standalone worker"
    ready_timeout = 60.0

    def __init__(self, ctx: ServerContext, index: int) -> None:
        super().__init__(ctx)
        self.name = f"spark-worker-{index}"
        self.index = index

    @property
    def port(self) -> int:
        return self.ctx.ports[worker_ui_port_name(self.index)]

    def argv(self) -> list[str]:
        return [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            f"spark://{LOOPBACK}:{self.ctx.ports['spark-master']}",
            "--host",
            LOOPBACK,
            "--cores",
            str(WORKER_CORES),
            "--memory",
            WORKER_MEMORY,
            "--webui-port",
            str(self.port),
            "--work-dir",
            str(self.ctx.directory / "spark" / f"work-{self.index}"),
        ]

    def extra_env(self) -> dict[str, str]:
        return _spark_env()

    def probe(self) -> None:
        worker_registered(self.ctx.ports["spark-master-ui"], f"{LOOPBACK}:{self.port}", self.index)
