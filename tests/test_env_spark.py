"""Spark sessions from an environment's settings run their Python code in the project's
interpreter - in local mode and on the optional standalone cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.environment import LocalEnvironment, LocalOptions, SparkSettings
from tests.support import SPARK, server_handles

pytestmark = [pytest.mark.servers, SPARK]

# Runs in a fresh process, as the Spark runtime will: settings cross the process boundary.
JOB = textwrap.dedent(
    """
    import json, os, sys
    from harness.environment import SparkSettings, spark_session

    settings = SparkSettings.from_json(sys.argv[1])
    spark = spark_session(settings, "env-test")

    def where(_):
        import os, sys
        return (sys.executable, os.environ.get("CHAOSLAB_SERVER"))

    rdd = spark.sparkContext.parallelize(range(8), 4)
    workers = sorted(set(rdd.map(where).collect()))
    total = spark.range(1000).selectExpr("sum(id) AS s").first()["s"]
    print(json.dumps({
        "master": spark.sparkContext.master,
        "workers": workers,
        "total": total,
        "checkpoint": spark.conf.get("spark.sql.streaming.checkpointLocation"),
    }))
    spark.stop()
    """
)


def run_job(settings: SparkSettings) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", JOB, settings.to_json()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_spark_job_runs_with_the_project_interpreter(lab_env: LocalEnvironment) -> None:
    result = run_job(lab_env.spark)
    assert result["master"] == "local[2]"
    # Python workers are children of the driver's JVM, which the job's process started.
    assert result["workers"] == [[sys.executable, None]]
    assert result["total"] == sum(range(1000))
    assert Path(result["checkpoint"]).is_relative_to(lab_env.directory)
    # Spark's log goes to the environment's log directory, not the console.
    assert list((lab_env.directory / "logs").glob("spark-driver-*.log"))


@pytest.fixture(scope="module")
def standalone_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnvironment]:
    options = LocalOptions(spark_standalone=True, spark_cores=1)
    with LocalEnvironment(tmp_path_factory.mktemp("standalone"), options) as env:
        yield env


def test_spark_job_runs_on_the_standalone_worker(standalone_env: LocalEnvironment) -> None:
    handles = server_handles(standalone_env.directory)
    assert {"spark-master", "spark-worker"} <= handles.keys()
    status = {s.name: s for s in standalone_env.status().servers}
    assert status["spark-master"].ready and status["spark-worker"].ready

    result = run_job(standalone_env.spark)
    assert result["master"] == standalone_env.spark.master
    assert result["master"].startswith("spark://127.0.0.1:")
    # The tasks ran in an executor the worker process launched (it inherits the worker's
    # marker), under the project's interpreter.
    assert result["workers"] == [[sys.executable, "spark-worker"]]
    assert result["total"] == sum(range(1000))
