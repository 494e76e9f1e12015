"""The class-data archives (harness/environment/class_data.py): mapped only when one exists
for this Java and the program's jars; a probe's archive is one a JVM on its program's
classpath maps."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from harness.environment import jars, spark_cds
from harness.environment.class_data import ClassData
from harness.environment.servers import kafka
from harness.paths import HOME_VAR
from harness.pipeline.connect import worker as connect_worker
from tests import hanging_probe


def test_a_jvm_maps_the_archive_only_when_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOME_VAR, str(tmp_path))
    for archive in (spark_cds.DRIVER, kafka.CLASS_DATA, connect_worker.CLASS_DATA):
        path = archive.path()
        assert path.is_relative_to(tmp_path / ".chaoslab")
        assert archive.java_options() == ()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        assert f"-XX:SharedArchiveFile={path}" in archive.java_options()
    assert spark_cds.DRIVER.path() != kafka.CLASS_DATA.path() != connect_worker.CLASS_DATA.path()


def test_the_archive_is_named_for_the_jars_it_was_made_with(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    folder.mkdir()
    archive = ClassData("node", "a node", "probe", lambda: folder.glob("*.jar"))
    before = archive.path()
    (folder / "kafka-server-9.9.9.jar").write_bytes(b"")
    assert archive.path() != before


@pytest.mark.parametrize(
    ("archive", "classpath", "program"),
    [
        pytest.param(kafka.CLASS_DATA, jars.kafka, ["kafka.tools.StorageTool", "version"],
                     id="kafka-node"),
        pytest.param(connect_worker.CLASS_DATA, jars.connect,
                     ["org.apache.kafka.connect.cli.ConnectDistributed"], id="connect-worker"),
    ],
)  # fmt: skip
def test_a_probes_archive_is_mapped_by_a_jvm_on_its_programs_classpath(
    archive: ClassData, classpath: Callable[[], jars.JarSet], program: list[str]
) -> None:
    # The archive chaoslab fetch built for this checkout's jars (built here if not): -Xshare:on
    # refuses to start a JVM that cannot map it (another classpath, another Java), and the
    # class-loading log names the archive as the source of the classes it held. The storage
    # tool and Connect's usage message, not the probes' programs: most of what they load is
    # what the probe's JVM loaded (the JDK's own classes come from Java's base archive).
    built = archive.build(progress=lambda line: None)
    assert built is not None and built == archive.path()
    options = [o for o in archive.java_options() if o != "-Xshare:auto"]
    loaded = subprocess.run(
        [kafka.java(), *options, "-Xshare:on", "-Xlog:class+load=info", "-cp",
         classpath().classpath(), *program],
        capture_output=True, text=True, timeout=120,
    ).stdout.splitlines()  # fmt: skip
    top = [line for line in loaded if line.endswith("source: shared objects file (top)")]
    from_jars = [line for line in loaded if "source: file:" in line]
    assert any(" org.apache.kafka.common.config.AbstractConfig " in line for line in top)
    assert len(top) > 10 * len(from_jars), (len(top), len(from_jars), loaded[-5:])


def test_a_probe_past_its_deadline_is_stopped_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A probe's JVMs are its children: a probe stopped alone would leave them running.
    monkeypatch.setenv(HOME_VAR, str(tmp_path))
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv(hanging_probe.PID_FILE, str(pid_file))
    archive = ClassData("hangs", "a program", "tests.hanging_probe", lambda: (), timeout=5.0)
    said: list[str] = []
    assert archive.build(progress=said.append) is None
    assert any("the probe failed" in line for line in said), said
    child = int(pid_file.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie", child
