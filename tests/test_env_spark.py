"""Spark sessions from an environment's settings run their Python code in the project's
interpreter - in local mode and on the optional standalone cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.environment.local import LocalEnvironment
from harness.environment.spark import SparkCluster, SparkSettings
from tests.support import SPARK, server_handles
from tests.tiers import LIBRARY

pytestmark = [pytest.mark.servers, SPARK]

# Runs in a fresh process, as the Spark runtime will: settings cross the process boundary.
JOB = textwrap.dedent(
    """
    import json, os, sys
    from harness.environment.spark import SparkSettings, spark_session

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
        "tmpdir": spark.sparkContext._jvm.System.getProperty("java.io.tmpdir"),
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
    # The driver's temporary folders (a session's artifacts-UUID, left behind even by a clean
    # stop) go in the environment's folder, wiped with it - not in the system's /tmp.
    assert result["tmpdir"] == lab_env.spark.local_dir
    # Spark's log goes to the environment's log directory, not the console.
    assert list((lab_env.directory / "logs").glob("spark-driver-*.log"))


@LIBRARY  # the standalone cluster's scenarios (spark-executor-loss) run on it in make test
def test_the_standalone_cluster_starts_when_asked_and_runs_tasks_on_both_workers(
    lab_env: LocalEnvironment,
) -> None:
    # On the shared environment: `up` without --spark-standalone starts no master
    # (test_env_supervision's test_down_stops_every_server names every server `up` started), and
    # an environment of its own would lengthen the suite's Spark chain (docs/performance.md).
    settings = lab_env.spark_on(SparkCluster.STANDALONE)  # started now, or by an earlier test
    names = {"spark-master", "spark-worker-1", "spark-worker-2"}
    assert names <= server_handles(lab_env.directory).keys()
    status = {s.name: s for s in lab_env.status().servers}
    assert all(status[name].ready for name in names)
    assert lab_env.spark_on(SparkCluster.STANDALONE) == settings  # once is enough

    result = run_job(settings)
    assert result["master"] == settings.master
    assert result["master"].startswith("spark://127.0.0.1:")
    # The tasks ran in executors the two worker processes launched (each inherits its
    # worker's marker), under the project's interpreter: one single-core executor on each.
    assert result["workers"] == [
        [sys.executable, "spark-worker-1"],
        [sys.executable, "spark-worker-2"],
    ]
    assert result["total"] == sum(range(1000))
