"""An optional Spark standalone cluster (one master, one worker) as separate processes, so that
losing an executor or a worker can be a fault. Without it, sessions run ``local[N]``."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from harness.environment.local.server import LocalServer, ServerContext
from harness.environment.ports import LOOPBACK
from harness.readiness import NotReady


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _spark_env() -> dict[str, str]:
    # SPARK_LOCAL_IP also decides where the web UIs bind: without it they listen on 0.0.0.0.
    return {"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": LOOPBACK}


def _master_json(ui_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2) as response:
        master: dict[str, Any] = json.load(response)
    return master


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
        status = _master_json(self.ui_port).get("status")
        if status != "ALIVE":
            raise NotReady(f"master status {status}")


class SparkWorker(LocalServer):
    name = "spark-worker"
    role = "Spark standalone worker"
    ready_timeout = 60.0

    def __init__(self, ctx: ServerContext, cores: int) -> None:
        super().__init__(ctx)
        self.cores = cores

    @property
    def port(self) -> int:
        return self.ctx.ports["spark-worker-ui"]

    def argv(self) -> list[str]:
        return [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            f"spark://{LOOPBACK}:{self.ctx.ports['spark-master']}",
            "--host",
            LOOPBACK,
            "--cores",
            str(self.cores),
            "--memory",
            "2g",
            "--webui-port",
            str(self.port),
            "--work-dir",
            str(self.ctx.directory / "spark" / "work"),
        ]

    def extra_env(self) -> dict[str, str]:
        return _spark_env()

    def probe(self) -> None:
        workers = _master_json(self.ctx.ports["spark-master-ui"]).get("workers", [])
        if not any(w.get("state") == "ALIVE" for w in workers):
            raise NotReady("no worker registered with the master yet")
