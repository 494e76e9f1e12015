"""Spark sessions for the lab: the project's interpreter, loopback only, quiet, no UI port.

An environment hands out ``SparkSettings`` (a small, JSON-able record) rather than a session,
because the Spark runtime runs in its own process - a session cannot cross a process boundary,
a settings record can.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Self

from harness.environment import spark_cds
from harness.environment.jars import spark_connector_jars
from harness.environment.jvm import LIGHT_JVM

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J2_TEMPLATE = """\
# Written by chaoslab: Spark's own logging goes to a file, only errors reach the console. Its
# times carry their date and zone: the lab reads lost tasks from it (harness.pipeline.spark.log).
status = error
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:chaoslab.spark.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} %p %c{1}: %m%n
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
# Harmless on a laptop, alarming in a lab's output.
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


class SparkCluster(StrEnum):
    """Where a scenario's Spark runs: in the driver's JVM (``local[N]``), or on the
    environment's standalone cluster (a master and two workers, each executor its own JVM)."""

    LOCAL = "local"
    STANDALONE = "standalone"


# The standalone cluster's workers (both backends that start one): two, so that a task lost with
# one worker's executor has another to run on.
WORKERS = (1, 2)

# On the standalone cluster every application (a scenario runs one driver per variant when a
# fault targets one variant's processes) gets one single-core executor on each of the two
# workers: a task lost with one executor is retried on the other, and four variants' drivers
# side by side all get their executors (the workers offer more cores and memory than two real
# cores hold - slots, not CPUs).
STANDALONE_APP = {
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    # Jobs wait (up to 30 s) until both executors registered - standalone's default is not to
    # wait (ratio 0), and a task retried "elsewhere" needs an elsewhere.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
}


def checkpoint_root(directory: Path) -> Path:
    """Where an environment in ``directory`` keeps its streaming queries' checkpoints."""
    return directory / "spark" / "checkpoints"


@dataclass(frozen=True)
class SparkSettings:
    """Everything needed to build a Spark session against an environment."""

    master: str  # local[N] or spark://127.0.0.1:PORT
    python: str  # the interpreter Python workers run under
    checkpoint_root: str  # streaming checkpoints go below here, one directory per run
    local_dir: str  # scratch space (shuffle, spills)
    log_dir: str
    log_config: str  # log4j2 properties file

    @classmethod
    def for_directory(cls, directory: Path, master: str) -> Self:
        spark_dir = directory / "spark"
        return cls(
            master=master,
            python=sys.executable,
            checkpoint_root=str(checkpoint_root(directory)),
            local_dir=str(spark_dir / "local"),
            log_dir=str(directory / "logs"),
            log_config=str(spark_dir / "log4j2.properties"),
        )

    def prepare(self) -> None:
        """Create the directories and the logging configuration."""
        for d in (self.checkpoint_root, self.local_dir, self.log_dir):
            Path(d).mkdir(parents=True, exist_ok=True)
        Path(self.log_config).write_text(LOG4J2_TEMPLATE)

    def checkpoint(self, name: str) -> str:
        return str(Path(self.checkpoint_root) / name)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls(**json.loads(text))


def driver_address(master: str) -> str:
    """The address executors connect back to the driver at: this machine's (or container's)
    interface toward a standalone master ``spark://HOST:PORT`` - 127.0.0.1 for the local
    backend's master, the container's address on the environment's network for a driver in a
    consumer's container; 127.0.0.1 in local mode (the executors are in the driver's JVM)."""
    if not master.startswith("spark://"):
        return "127.0.0.1"
    host, port = master.removeprefix("spark://").rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, int(port)))  # a UDP connect picks the route; nothing is sent
        address: str = probe.getsockname()[0]
    return address


def spark_session(
    settings: SparkSettings, app_name: str = "chaoslab", conf: dict[str, str] | None = None
) -> SparkSession:
    """Build (or return this process's existing) Spark session for ``settings``."""
    from pyspark.sql import SparkSession

    # Read by the JVM launcher: bind to that address and stop Spark guessing another interface.
    address = driver_address(settings.master)
    os.environ.setdefault("SPARK_LOCAL_IP", address)
    os.environ["PYSPARK_PYTHON"] = settings.python
    log_file = Path(settings.log_dir) / f"spark-driver-{os.getpid()}.log"
    java_opts = (
        f"-Dlog4j2.configurationFile=file:{settings.log_config} -Dchaoslab.spark.log={log_file} "
        + " ".join(LIGHT_JVM)
    )
    options = {
        "spark.pyspark.python": settings.python,
        "spark.pyspark.driver.python": settings.python,
        # The driver maps the class-data archive `chaoslab fetch` made (if any): it starts
        # sooner (harness.environment.spark_cds). Its temporary folders go in the
        # environment's: a Spark 4 session makes an ``artifacts-UUID`` folder in
        # java.io.tmpdir and leaves it there, stopped or killed (they pile up in /tmp:
        # docs/environment.md); in the environment's they go with it.
        "spark.driver.extraJavaOptions": " ".join(
            [java_opts, f"-Djava.io.tmpdir={settings.local_dir}", *spark_cds.DRIVER.java_options()]
        ),
        "spark.executor.extraJavaOptions": java_opts,
        "spark.driver.host": address,
        "spark.driver.bindAddress": address,
        # The UI would take port 4040 (or the next free one): a fixed port, and not needed.
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": settings.local_dir,
        "spark.sql.streaming.checkpointLocation": settings.checkpoint_root,
        "spark.sql.shuffle.partitions": "4",
        # The lab's queries are tiny: compiling them (whole-stage codegen, adaptive plans) costs
        # more CPU than it saves, and a Spark driver's start already costs much CPU
        # (docs/performance.md).
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.adaptive.enabled": "false",
        "spark.executor.memory": "1g",
        **(STANDALONE_APP if settings.master.startswith("spark://") else {}),
        # How long the JVM waits for a Python worker it started to connect back (default 15 s):
        # on a busy 2-core machine a worker missed the default, and the query failed while
        # initializing (docs/performance.md).
        "spark.python.authenticate.socketTimeout": "120s",
        # Spark's Kafka connector: local files, fetched once at setup, asked for only where a
        # session is built (not at every `up` or `status`); nothing is downloaded here.
        "spark.jars": ",".join(spark_connector_jars()),
        **(conf or {}),
    }
    builder = SparkSession.builder.master(settings.master).appName(app_name)
    for key, value in options.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
