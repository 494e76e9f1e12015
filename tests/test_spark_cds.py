"""The Spark driver's class-data archive (harness/environment/spark_cds.py): mapped only when
it exists for this Java and PySpark."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.environment import spark_cds
from harness.paths import HOME_VAR


def test_a_driver_maps_the_archive_only_when_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOME_VAR, str(tmp_path))
    archive = spark_cds.archive_path()
    assert archive.is_relative_to(tmp_path / ".chaoslab")
    assert spark_cds.java_options() == ()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in spark_cds.java_options()


def test_the_archive_is_named_for_the_jars_it_was_made_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOME_VAR, str(tmp_path))
    before = spark_cds.archive_path()
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core_2.13-9.9.9.jar").write_bytes(b"")
    monkeypatch.setattr(spark_cds, "pyspark_jars", lambda: jars)
    assert spark_cds.archive_path() != before
