"""The Java jars the lab runs, fetched once with Maven and reused (offline) after that.

Each set is a POM in ``harness/environment/maven`` (``kafka.pom.xml``: an Apache Kafka broker;
``spark-kafka.pom.xml``: Spark's Kafka connector, for the Spark runtime). ``fetch``
runs ``mvn dependency:copy-dependencies`` into the project's ``.chaoslab/jars/NAME-VERSION``
(git ignores it) and marks the folder complete; Maven's own defaults say where the jars come
from. ``chaoslab fetch`` (which ``make`` runs) and ``chaoslab doctor`` use this module.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from harness.errors import LabError
from harness.paths import project_root

POMS = Path(__file__).resolve().parent / "maven"
COMPLETE = ".complete"  # written last: a folder without it is a fetch that did not finish
FETCH_TIMEOUT_S = 900.0


class JarsMissing(LabError):
    """A set of jars is not fetched (or Maven could not fetch it)."""


@dataclass(frozen=True)
class JarSet:
    name: str  # e.g. "kafka"
    version: str  # the POM's <kafka.version>, ...

    @property
    def pom(self) -> Path:
        return POMS / f"{self.name}.pom.xml"

    @property
    def directory(self) -> Path:
        return project_root() / ".chaoslab" / "jars" / f"{self.name}-{self.version}"

    @property
    def fetched(self) -> bool:
        return (self.directory / COMPLETE).exists()

    def classpath(self) -> str:
        """``DIR/*`` for ``java -cp``; JarsMissing says how to fetch them."""
        if not self.fetched:
            raise JarsMissing(
                f"{self.name} {self.version} is not fetched into {self.directory} "
                "(run: make, or chaoslab fetch)"
            )
        return str(self.directory / "*")

    def jars(self) -> list[Path]:
        return sorted(self.directory.glob("*.jar"))


@cache
def jar_set(name: str) -> JarSet:
    """The set ``name``, at the version its POM pins (``<NAME.version>``)."""
    pom = POMS / f"{name}.pom.xml"
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = ET.parse(pom).getroot().findtext(f"m:properties/m:{name}.version", namespaces=ns)
    if not version:
        raise ValueError(f"{pom} pins no <{name}.version>")
    return JarSet(name, version)


def kafka() -> JarSet:
    return jar_set("kafka")


def spark_kafka() -> JarSet:
    """Spark's Kafka connector, at exactly the PySpark version the project pins."""
    return jar_set("spark-kafka")


def every_set() -> tuple[JarSet, ...]:
    return (kafka(), spark_kafka())


def artifact(jar: Path) -> str:
    """``kafka-clients`` of ``kafka-clients-3.9.2.jar``."""
    return jar.name.rsplit("-", 1)[0]


def pyspark_problem() -> str | None:
    """Why the installed PySpark cannot load the fetched connector (None if it can)."""
    want = spark_kafka().version
    try:
        installed = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return "pyspark is not installed (run: make)"
    if installed == want:
        return None
    return (
        f"pyspark {installed} is installed, but Spark's Kafka connector is {want}; the two must "
        f"match (run: make - pyproject.toml pins pyspark=={want})"
    )


def spark_connector_jars() -> tuple[str, ...]:
    """The connector's jars for ``spark.jars``: local files, fetched once, only those the
    PySpark install lacks. JarsMissing says what to do when they cannot be used."""
    problem = pyspark_problem()
    if problem:
        raise JarsMissing(problem)
    connector = spark_kafka()
    connector.classpath()  # JarsMissing if not fetched
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None  # pyspark_problem found it installed
    return tuple(str(j) for j in missing_from(connector, Path(spec.origin).parent / "jars"))


def missing_from(jars: JarSet, installed: Path) -> list[Path]:
    """The set's jars whose artifact is not among ``installed``'s jars (a Spark install's own
    folder): Maven also brings Spark's own dependencies (Scala, Hadoop's client, slf4j) at
    other versions, which must not shadow the install's."""
    present = {artifact(j) for j in installed.glob("*.jar")}
    return [j for j in jars.jars() if artifact(j) not in present]


def maven() -> str | None:
    return shutil.which("mvn")


# The examples built with Maven at setup: examples/NAME/target/NAME.jar (a user's own consumer
# of the lab's, in Java: the README's "Your own consumer").
EXAMPLES = ("java-listener",)


def example_jar(name: str) -> Path:
    return project_root() / "examples" / name / "target" / f"{name}.jar"


def build_example(name: str, progress: Callable[[str], None] = print) -> Path:
    """Build ``examples/NAME`` with Maven unless its jar is newer than its sources."""
    folder = project_root() / "examples" / name
    jar = example_jar(name)
    sources = [folder / "pom.xml", *(p for p in (folder / "src").rglob("*") if p.is_file())]
    if jar.exists() and jar.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return jar
    progress(f"building examples/{name} with Maven (once per change)")
    started = time.monotonic()
    _maven(f"build examples/{name}", "-f", str(folder / "pom.xml"), "package", "-DskipTests")
    progress(f"  {jar.relative_to(project_root())} in {time.monotonic() - started:.1f}s")
    return jar


def _maven(what: str, *args: str) -> None:
    """``mvn -q -B ARGS``; JarsMissing saying what could not be done, with Maven's last lines."""
    mvn = maven()
    if mvn is None:
        raise JarsMissing(
            f"Maven (mvn) is needed to {what}: install it (Debian: apt-get install maven)"
        )
    try:
        done = subprocess.run(
            [mvn, "-q", "-B", *args], capture_output=True, text=True, timeout=FETCH_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise JarsMissing(f"Maven did not {what} within {FETCH_TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise JarsMissing(f"Maven could not {what}:\n{tail}")


def fetch(jars: JarSet, progress: Callable[[str], None] = print) -> Path:
    """Fetch ``jars`` with Maven unless they are already there; returns their folder."""
    if jars.fetched:
        return jars.directory
    partial = jars.directory.with_name(jars.directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    progress(f"fetching {jars.name} {jars.version} with Maven into {jars.directory} (once)")
    started = time.monotonic()
    _maven(f"fetch {jars.name} {jars.version}", "-f", str(jars.pom),
           "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
           "-DincludeScope=runtime")  # fmt: skip
    (partial / COMPLETE).write_text(f"{jars.name} {jars.version}\n")
    shutil.rmtree(jars.directory, ignore_errors=True)
    partial.rename(jars.directory)
    count = len(jars.jars())
    progress(f"  {count} jars in {time.monotonic() - started:.1f}s")
    return jars.directory
