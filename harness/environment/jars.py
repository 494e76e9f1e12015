"""The Java jars the lab runs, fetched once with Maven and reused (offline) after that.

Each set is a POM in ``harness/environment/maven`` (``kafka.pom.xml``: an Apache Kafka broker;
``spark-kafka.pom.xml``: Spark's Kafka connector, for the Spark runtime; ``mongo-spark.pom.xml``:
MongoDB's Spark connector and its driver; ``connect.pom.xml``: a Kafka Connect worker;
``mongo-kafka.pom.xml``: MongoDB's Kafka connector, a plugin of the workers;
``connect-tools.pom.xml``: Kafka's tool that writes a plugin's missing manifests;
``debezium-postgres.pom.xml``: Debezium's PostgreSQL connector, a CDC source's plugin). ``fetch``
runs ``mvn dependency:copy-dependencies`` into the project's ``.chaoslab/jars/NAME-VERSION``
(git ignores it) and marks the folder complete; Maven's own defaults say where the jars come
from. ``chaoslab fetch`` (which ``make`` runs) and ``chaoslab doctor`` use this module.
"""

from __future__ import annotations

import hashlib
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

    def make(self, into: Path) -> None:
        """Put the set's jars into ``into``: Maven copies the POM's dependencies."""
        _maven(f"fetch {self.name} {self.version}", "-f", str(self.pom),
               "dependency:copy-dependencies", f"-DoutputDirectory={into}",
               "-DincludeScope=runtime")  # fmt: skip


@dataclass(frozen=True)
class PluginJarSet(JarSet):
    """A Connect plugin: Connect gives each jar directly on its plugin path a class loader of
    its own, so the jars go into one folder (the plugin) inside the set's folder (the plugin
    path's entry). Kafka's own tool then writes the ServiceLoader manifests the plugin lacks
    (a shim jar beside its jars), so that a worker finds it without scanning every class of it
    (``plugin.discovery=service_load``: most of a worker's start otherwise)."""

    @property
    def plugin(self) -> Path:
        return self.directory / self.name

    @property
    def fetched(self) -> bool:
        # A folder of the layout before plugin folders (its jars at the top) is fetched again.
        return super().fetched and self.plugin.is_dir()

    def jars(self) -> list[Path]:
        return sorted(self.plugin.glob("*.jar"))

    def make(self, into: Path) -> None:
        super().make(into / self.name)
        sync_manifests(into)


def sync_manifests(plugin_path: Path) -> None:
    """Kafka's ``connect-plugin-path sync-manifests`` on ``plugin_path``: the manifests its
    plugins lack, written beside them."""
    java = shutil.which("java") or "java"
    classpath = f"{connect().classpath()}:{connect_tools().classpath()}"
    tool = "org.apache.kafka.tools.ConnectPluginPath"
    _run([java, "-cp", classpath, tool, "sync-manifests", "--plugin-path", str(plugin_path)],
         f"write the manifests of {plugin_path.name}")  # fmt: skip


# The lab's own Java, compiled here with the JDK's javac against jars the lab has already:
# inside Spark's JVMs (harness/environment/spark_hooks), a checkpoint file manager that holds a
# query's log entries at its crash points and MongoDB's Spark connector's client with a command
# listener; beside Kafka Connect (harness/environment/connect_hooks), Connect's own validation
# of a connector config, run before anything starts.
HOOKS_SOURCES = Path(__file__).resolve().parent / "spark_hooks"
CONNECT_HOOKS_SOURCES = Path(__file__).resolve().parent / "connect_hooks"


@dataclass(frozen=True)
class BuiltJarSet(JarSet):
    """A jar the lab builds from its own sources (its version: their digest, and the jars they
    are compiled against)."""

    sources: Path = HOOKS_SOURCES
    # The classpath entries to compile against, asked when it is built (they must be there).
    against: Callable[[], list[str]] = lambda: []

    @property
    def jar(self) -> Path:
        return self.directory / f"chaoslab-{self.name}.jar"

    def make(self, into: Path) -> None:
        javac, jar = shutil.which("javac"), shutil.which("jar")
        if javac is None or jar is None:
            raise JarsMissing(
                f"a JDK's javac and jar are needed to build the lab's {self.name} "
                "(Debian: apt-get install openjdk-17-jdk-headless)"
            )
        classes = into / "classes"
        sources = sorted(str(p) for p in self.sources.rglob("*.java"))
        _run([javac, "--release", "17", "-nowarn", "-cp", ":".join(self.against()), "-d",
              str(classes), *sources], f"compile {self.name}")  # fmt: skip
        _run([jar, "--create", "--file", str(into / self.jar.name), "-C", str(classes), "."],
             f"package {self.name}")  # fmt: skip
        shutil.rmtree(classes)


def _built(
    name: str, sources: Path, against: Callable[[], list[str]], *versions: str
) -> BuiltJarSet:
    """The lab's jar ``name``, at the digest of its sources and of what they are built with."""
    digest = hashlib.sha256()
    for source in sorted(sources.rglob("*.java")):
        digest.update(source.relative_to(sources).as_posix().encode())
        digest.update(source.read_bytes())
    digest.update(" ".join(versions).encode())
    return BuiltJarSet(name, digest.hexdigest()[:12], sources, against)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise JarsMissing(f"could not {what}:\n{tail}")


def pyspark_jars() -> Path:
    """The PySpark install's own jars (Spark's, Scala's, Hadoop's client)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise JarsMissing("pyspark is not installed (run: make)")
    return Path(spec.origin).parent / "jars"


@cache
def spark_hooks() -> BuiltJarSet:
    """The lab's Spark hooks, built against the PySpark install's jars and the connector's."""
    return _built(
        "spark-hooks",
        HOOKS_SOURCES,
        lambda: [str(pyspark_jars() / "*"), mongo_spark().classpath()],
        spark_kafka().version,
        mongo_spark().version,
    )


def connect_hooks() -> BuiltJarSet:
    """The lab's Connect validator, built against Connect's jars."""
    return _built("connect-hooks", CONNECT_HOOKS_SOURCES, lambda: [connect().classpath()],
                  connect().version)  # fmt: skip


@cache
def jar_set(name: str, kind: type[JarSet] = JarSet) -> JarSet:
    """The set ``name``, at the version its POM pins (``<NAME.version>``)."""
    pom = POMS / f"{name}.pom.xml"
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = ET.parse(pom).getroot().findtext(f"m:properties/m:{name}.version", namespaces=ns)
    if not version:
        raise ValueError(f"{pom} pins no <{name}.version>")
    return kind(name, version)


def kafka() -> JarSet:
    return jar_set("kafka")


def spark_kafka() -> JarSet:
    """Spark's Kafka connector, at exactly the PySpark version the project pins."""
    return jar_set("spark-kafka")


def mongo_spark() -> JarSet:
    """MongoDB's Spark connector and the Java driver it runs on (the connector variants)."""
    return jar_set("mongo-spark")


def connect() -> JarSet:
    """A Kafka Connect worker in distributed mode (the connect runtime)."""
    return jar_set("connect")


def connect_tools() -> JarSet:
    """Kafka's connect-plugin-path tool, run on the Connect set's jars at fetch."""
    return jar_set("connect-tools")


def mongo_kafka() -> JarSet:
    """MongoDB's Kafka connector: its folder is a plugin path entry (``PluginJarSet``)."""
    return jar_set("mongo-kafka", PluginJarSet)


def debezium_postgres() -> JarSet:
    """Debezium's PostgreSQL connector: its folder is a plugin path entry (``PluginJarSet``)."""
    return jar_set("debezium-postgres", PluginJarSet)


def every_set() -> tuple[JarSet, ...]:
    """Every set, in the order they are made (the hooks compile against the connector)."""
    return (
        kafka(),
        spark_kafka(),
        mongo_spark(),
        spark_hooks(),
        connect(),
        connect_tools(),
        mongo_kafka(),
        connect_hooks(),
        debezium_postgres(),
    )


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
    """The jars for ``spark.jars`` (Spark's Kafka connector, MongoDB's Spark connector, the
    lab's hooks): local files, fetched once, only those the PySpark install lacks. JarsMissing
    says what to do when they cannot be used."""
    problem = pyspark_problem()
    if problem:
        raise JarsMissing(problem)
    installed = pyspark_jars()
    found: list[str] = []
    for connector in (spark_kafka(), mongo_spark(), spark_hooks()):
        connector.classpath()  # JarsMissing if not fetched
        found += [str(j) for j in missing_from(connector, installed)]
    return tuple(found)


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
    how = "building" if isinstance(jars, BuiltJarSet) else "fetching"
    progress(f"{how} {jars.name} {jars.version} into {jars.directory} (once)")
    started = time.monotonic()
    partial.mkdir(parents=True)
    jars.make(partial)
    (partial / COMPLETE).write_text(f"{jars.name} {jars.version}\n")
    shutil.rmtree(jars.directory, ignore_errors=True)
    partial.rename(jars.directory)
    if isinstance(jars, BuiltJarSet):  # an earlier build of the lab's sources is not used again
        for old in jars.directory.parent.glob(f"{jars.name}-*"):
            if old != jars.directory:
                shutil.rmtree(old, ignore_errors=True)
    count = len(jars.jars())
    progress(f"  {count} jars in {time.monotonic() - started:.1f}s")
    return jars.directory
