"""``chaoslab doctor``: what this machine has, and which backends can run here and why not."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata

from confluent_kafka import libversion

from harness.environment import jars
from harness.environment.backends import REGISTRY
from harness.environment.servers import postgres

PACKAGES = (
    "pyspark",
    "confluent-kafka",
    "pymongo",
    "testcontainers",
    "jupyterlab",
    "papermill",
    "matplotlib",
    "pandas",
    "pyarrow",
    "secantusdb",
    "psycopg",
)
MIN_JAVA = 17  # Spark 4, Kafka 4


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class BackendVerdict:
    backend: str
    can_run: bool
    reason: str


@dataclass(frozen=True)
class Diagnosis:
    checks: tuple[Check, ...]
    backends: tuple[BackendVerdict, ...]

    def can_run(self, backend: str) -> bool:
        return any(b.backend == backend and b.can_run for b in self.backends)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", ok, f"{sys.version.split()[0]} ({sys.executable})")


def _java() -> Check:
    java = shutil.which("java")
    if java is None:
        return Check("java", False, "no java on PATH (Kafka and Spark need Java 17 or newer)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    first = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else ""
    match = re.search(r'version "(\d+)', first)
    major = int(match.group(1)) if match else 0
    ok = major >= MIN_JAVA
    detail = first.strip() + ("" if ok else f" (Kafka and Spark need Java {MIN_JAVA} or newer)")
    return Check("java", ok, detail)


def _package(name: str) -> Check:
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return Check(name, False, "not installed (run: make test, or pip install -e .)")
    detail = version
    if name == "confluent-kafka":
        detail += f" (librdkafka {libversion()[0]})"
    if name == "pyspark" and (problem := jars.pyspark_problem()):
        return Check(name, False, problem)
    return Check(name, True, detail)


def _maven() -> Check:
    mvn = jars.maven()
    if mvn is None:
        return Check("maven", False, "no mvn on PATH (needed once, to fetch Kafka's jars)")
    out = subprocess.run([mvn, "-v"], capture_output=True, text=True, timeout=60)
    first = out.stdout.splitlines()[0] if out.stdout else out.stderr.strip()
    return Check("maven", out.returncode == 0, re.sub(r"\x1b\[[0-9;]*m", "", first).strip())


def _jars(jar_set: jars.JarSet) -> Check:
    if not jar_set.fetched:
        return Check(
            jar_set.name, False, f"{jar_set.version} not fetched (run: make, or chaoslab fetch)"
        )
    found = jar_set.jars()
    # A small set is named jar by jar: which connector and which driver a Spark session gets.
    named = f" ({', '.join(j.stem for j in found)})" if len(found) <= 6 else ""
    return Check(
        jar_set.name, True, f"{jar_set.version}, {len(found)} jars{named} in {jar_set.directory}"
    )


def _engine() -> Check:
    # The backend that builds images runs on a container engine; its module says which.
    problem, description = (
        next(b for b in REGISTRY.values() if b.builds_images).load().engine_check()
    )
    return Check("container engine", problem is None, description)


def _debootstrap() -> Check:
    found = shutil.which("debootstrap")
    detail = (
        found or "not installed: the lab's base image is made with it (apt-get install debootstrap)"
    )
    return Check("debootstrap", found is not None, detail)


def _postgresql() -> Check:
    found, detail = postgres.installed()
    return Check("postgresql", found is not None, f"{detail} ({found})" if found else detail)


def diagnose() -> Diagnosis:
    checks = (
        _python(),
        _java(),
        _maven(),
        *(_jars(j) for j in jars.every_set()),
        *(_package(p) for p in PACKAGES),
        _postgresql(),
        _engine(),
        _debootstrap(),
    )
    by_name = {c.name: c for c in checks}
    jar_names = tuple(j.name for j in jars.every_set())
    local_needs = ("python", "java", *jar_names, "pyspark", "secantusdb")
    missing = [f"{n}: {by_name[n].detail}" for n in local_needs if not by_name[n].ok]
    if not all(by_name[n].ok for n in jar_names) and not by_name["maven"].ok:
        missing.append(f"maven: {by_name['maven'].detail}")
    # PostgreSQL is a CDC source's alone: without it the rest runs, and the doctor says so.
    without = "" if by_name["postgresql"].ok else " (no PostgreSQL: no CDC source)"
    local = BackendVerdict(
        "local",
        not missing,
        "; ".join(missing) or f"Apache Kafka, SecantusDB and Spark are here{without}",
    )
    needs = [by_name[n] for n in ("container engine", "debootstrap", *jar_names)]
    lacking = [f"{c.name}: {c.detail}" for c in needs if not c.ok]
    containers = BackendVerdict(
        "containers",
        not lacking,
        "; ".join(lacking)
        or f"{by_name['container engine'].detail}; the lab's images are built here",
    )
    return Diagnosis(checks, (local, containers))


def component_versions() -> dict[str, str]:
    """Versions of what a run used, for results.json."""
    versions = {
        "python": sys.version.split()[0],
        "kafka": jars.kafka().version,
        "mongo-spark-connector": jars.mongo_spark().version,
        "kafka-connect": jars.connect().version,
        "mongo-kafka-connect": jars.mongo_kafka().version,
    }
    for name in ("pyspark", "confluent-kafka", "pymongo", "secantusdb"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    versions["librdkafka"] = libversion()[0]
    return versions


def render(diagnosis: Diagnosis) -> str:
    lines = ["chaoslab doctor", ""]
    for check in diagnosis.checks:
        mark = "ok " if check.ok else "NO "
        lines.append(f"  {mark} {check.name:<16} {check.detail}")
    lines += ["", "backends:"]
    for verdict in diagnosis.backends:
        can = "can run" if verdict.can_run else "cannot run"
        lines.append(f"  {verdict.backend:<10} {can}: {verdict.reason}")
    return "\n".join(lines)
