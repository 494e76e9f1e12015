"""A class-data archive for the Spark driver's JVM (Java's AppCDS): the classes a driver loads as
it starts, dumped once from a probe driver and mapped by every driver after that.

A Spark driver starts many times in a run of the library (each variant's driver, started again
after each crash of ``cdc-crash-before-ack``), several at once on two cores. With the archive
a session starts markedly sooner; the warm-up after it is the same (docs/performance.md).

``build`` runs the probe (``chaoslab fetch`` does, once); ``java_options`` gives the
driver's options, empty when there is no archive for this Java, PySpark and jars folder - the
archive records the classpath, and a JVM refuses one made for another (it then starts without,
silently here). Nothing is shared between machines: the archive lives under ``.chaoslab/``.

    python -m harness.environment.spark_cds OUT.jsa     # the probe: a session, dumped at exit
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.environment.jars import pyspark_jars
from harness.environment.jvm import LIGHT_JVM
from harness.paths import project_root

BUILD_TIMEOUT_S = 300.0
# The archive's own warnings (classes it cannot hold; a mismatch at start) are not the lab's.
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"


def archive_path() -> Path:
    """Where the archive for this machine's Java and PySpark's jars is (or would be)."""
    java = shutil.which("java") or "java"
    jars = pyspark_jars()
    key = "\n".join([os.path.realpath(java), *sorted(p.name for p in jars.glob("*.jar"))])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return project_root() / ".chaoslab" / "spark-cds" / f"driver-{digest}.jsa"


def java_options() -> tuple[str, ...]:
    """The driver JVM's options that map the archive, if there is one."""
    archive = archive_path()
    if not archive.is_file():
        return ()
    return (f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", QUIET_CDS)


def build(progress: Callable[[str], None] = print) -> Path | None:
    """Dump the archive from a probe driver, once; None (and why, in ``progress``) when the
    probe fails - drivers then start without it."""
    archive = archive_path()
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    progress("building the Spark driver's class-data archive (once; ~10 s)")
    with tempfile.TemporaryDirectory(dir=archive.parent) as scratch:
        dumped = Path(scratch) / archive.name
        try:
            subprocess.run(
                [sys.executable, "-m", __name__, str(dumped)],
                check=True,
                capture_output=True,
                timeout=BUILD_TIMEOUT_S,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            tail = getattr(exc, "stderr", b"") or b""
            progress(f"  no archive: the probe driver failed ({exc}): {tail.decode()[-300:]}")
            return None
        if not dumped.is_file():
            progress("  no archive: the probe driver's JVM wrote none")
            return None
        dumped.replace(archive)  # whole, or not at all
    progress(f"  {archive} ({archive.stat().st_size // 2**20} MiB)")
    return archive


def _probe(out: Path) -> None:
    """A local driver that starts, runs a small job in a Python worker, and stops: its JVM
    dumps the classes it loaded to ``out`` as it exits."""
    from pyspark.sql import SparkSession  # the probe's own process: pyspark only here

    scratch = out.parent
    options = " ".join(
        [*LIGHT_JVM, f"-XX:ArchiveClassesAtExit={out}", QUIET_CDS, f"-Djava.io.tmpdir={scratch}"]
    )
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
