"""The Java jars the lab runs, fetched once with Maven and reused (offline) after that.

Each set is a POM in ``harness/maven`` (``kafka.pom.xml``: an Apache Kafka broker). ``fetch``
runs ``mvn dependency:copy-dependencies`` into the project's ``.chaoslab/jars/NAME-VERSION``
(git ignores it) and marks the folder complete; Maven's own defaults say where the jars come
from. ``chaoslab fetch`` (which ``make`` runs) and ``chaoslab doctor`` use this module.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
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


def maven() -> str | None:
    return shutil.which("mvn")


def fetch(jars: JarSet, progress: Callable[[str], None] = print) -> Path:
    """Fetch ``jars`` with Maven unless they are already there; returns their folder."""
    if jars.fetched:
        return jars.directory
    mvn = maven()
    if mvn is None:
        raise JarsMissing(
            f"Maven (mvn) is needed once, to fetch {jars.name} {jars.version}: "
            "install it (Debian: apt-get install maven)"
        )
    partial = jars.directory.with_name(jars.directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    progress(f"fetching {jars.name} {jars.version} with Maven into {jars.directory} (once)")
    started = time.monotonic()
    argv = [mvn, "-q", "-B", "-f", str(jars.pom), "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}", "-DincludeScope=runtime"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise JarsMissing(
            f"Maven did not fetch {jars.name} within {FETCH_TIMEOUT_S:.0f}s"
        ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise JarsMissing(f"Maven could not fetch {jars.name} {jars.version}:\n{tail}")
    (partial / COMPLETE).write_text(f"{jars.name} {jars.version}\n")
    shutil.rmtree(jars.directory, ignore_errors=True)
    partial.rename(jars.directory)
    count = len(jars.jars())
    progress(f"  {count} jars in {time.monotonic() - started:.1f}s")
    return jars.directory
