"""Class-data archives (Java's AppCDS) for the JVMs the lab starts many times: the classes a
program loads as it starts, dumped once from a probe run of it, and mapped by every start after
that.

A Spark driver starts many times in a run of the library (each variant's driver, again after
each crash of ``cdc-crash-before-ack``), a Kafka node at each environment's start and again at
each restart a fault makes, several at once on two cores. With its archive each starts sooner
and with less CPU; the work after the start is the same (docs/performance.md).

``build`` runs a program's probe (``chaoslab fetch`` does, once); ``java_options`` gives the
options that map its archive, empty when there is none for this Java and these jars - the
archive records the classpath, and a JVM refuses one made for another (it then starts without,
silently here). Nothing is shared between machines: the archives live under ``.chaoslab/``.
Each probe is a module run as ``python -m PROBE OUT.jsa``; its JVM takes ``dump_options(OUT)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.environment import process
from harness.paths import project_root

BUILD_TIMEOUT_S = 300.0
STOP_GRACE_S = 60.0  # a probe's JVMs stop cleanly well within it
# The archive's own warnings (classes it cannot hold; a mismatch at start) are not the lab's.
QUIET = "-Xlog:cds=off,cds+dynamic=off"


@dataclass(frozen=True)
class ClassData:
    """One program's archive: where it is, how a JVM maps it, how it is made."""

    name: str  # the archive file's stem, e.g. "spark-driver"
    program: str  # what starts with it, for progress lines: "the Spark driver"
    probe: str  # the module whose run dumps it
    jars: Callable[[], Iterable[Path]]  # the program's jars: their names key the archive
    timeout: float = BUILD_TIMEOUT_S  # the probe's, start to exit

    def path(self) -> Path:
        """Where the archive for this machine's Java and the program's jars is (or would be)."""
        java = shutil.which("java") or "java"
        key = "\n".join([os.path.realpath(java), *sorted(p.name for p in self.jars())])
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return project_root() / ".chaoslab" / "class-data" / f"{self.name}-{digest}.jsa"

    def java_options(self) -> tuple[str, ...]:
        """The JVM options that map the archive, if there is one."""
        archive = self.path()
        if not archive.is_file():
            return ()
        return (f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", QUIET)

    def build(self, progress: Callable[[str], None] = print) -> Path | None:
        """Dump the archive from the probe, once; None (and why, in ``progress``) when the
        probe fails - the program then starts without it."""
        archive = self.path()
        if archive.is_file():
            return archive
        archive.parent.mkdir(parents=True, exist_ok=True)
        progress(f"building {self.program}'s class-data archive (once: a probe run of it)")
        with tempfile.TemporaryDirectory(dir=archive.parent) as scratch:
            dumped = Path(scratch) / archive.name
            failed = self._probe(dumped)
            if failed is not None:
                progress(f"  no archive: the probe failed ({failed})")
                return None
            if not dumped.is_file():
                progress("  no archive: the probe's JVM wrote none")
                return None
            dumped.replace(archive)  # whole, or not at all
        progress(f"  {archive} ({archive.stat().st_size // 2**20} MiB)")
        return archive

    def _probe(self, out: Path) -> str | None:
        """Run the probe, dumping to ``out``; why it failed, or None. A probe stopped early (its
        deadline, Ctrl-C) is stopped with what it started: its JVMs are its children."""
        probe = subprocess.Popen(
            [sys.executable, "-m", self.probe, str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = probe.communicate(timeout=self.timeout)
        except BaseException as exc:
            with contextlib.suppress(psutil.NoSuchProcess):
                started = process.with_descendants([psutil.Process(probe.pid)])
                process.terminate(started, grace=STOP_GRACE_S, what=f"{self.program}'s probe")
            probe.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                return f"still running after {self.timeout:.0f} s"
            raise
        if probe.returncode != 0:
            return f"exit {probe.returncode}: {err.decode(errors='replace')[-300:]}"
        return None


def dump_options(out: Path) -> tuple[str, ...]:
    """A probe JVM's options: dump the classes it loaded to ``out`` as it exits."""
    return (f"-XX:ArchiveClassesAtExit={out}", QUIET)
