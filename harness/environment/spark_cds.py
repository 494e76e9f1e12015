"""The Spark driver's class-data archive (``harness.environment.class_data``): the classes a
driver loads as it starts, dumped from a probe driver.

    python -m harness.environment.spark_cds OUT.jsa     # the probe: a session, dumped at exit
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.environment.class_data import ClassData, dump_options
from harness.environment.jars import pyspark_jars
from harness.environment.jvm import LIGHT_JVM

DRIVER = ClassData(
    name="spark-driver",
    program="the Spark driver",
    probe=__name__,
    jars=lambda: pyspark_jars().glob("*.jar"),
)


def _probe(out: Path) -> None:
    """A local driver that starts, runs a small job in a Python worker, and stops: its JVM
    dumps the classes it loaded to ``out`` as it exits."""
    from pyspark.sql import SparkSession  # the probe's own process: pyspark only here

    scratch = out.parent
    options = " ".join([*LIGHT_JVM, *dump_options(out), f"-Djava.io.tmpdir={scratch}"])
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("chaoslab-cds-probe")
        .config("spark.driver.extraJavaOptions", options)
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", str(scratch))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x + 1).collect()
    spark.range(10).selectExpr("sum(id)").collect()
    spark.stop()


if __name__ == "__main__":
    _probe(Path(sys.argv[1]))
