"""The Spark runtime, started as a script, hands Spark its task function by reference.

Run as ``python -m harness.pipeline.spark.runtime``, the module's code runs as ``__main__``, and
cloudpickle ships a function of ``__main__`` by value, with a fresh copy of the globals it uses:
the executors' writer cache was empty in every task, which made its own MongoDB client, history
file and Kafka producer (small tasks took many times as long: docs/performance.md).
"""

from __future__ import annotations

import runpy
import sys

import pytest
from pyspark import cloudpickle

from harness.pipeline.spark import runtime as spark_runtime


@pytest.mark.filterwarnings("ignore:'harness.pipeline.spark.runtime' found in sys.modules")
def test_run_as_a_script_the_runtime_is_the_imported_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(spark_runtime, "main", ran.append)
    monkeypatch.setattr(sys, "argv", ["spark_runtime", "lane.json"])
    script = runpy.run_module("harness.pipeline.spark.runtime", run_name="__main__")
    # The imported module's main ran, not the script's copy of it ...
    assert ran == [["lane.json"]]
    # ... because the copy's task function would carry its own, empty writer cache.
    assert b"_WRITERS" in cloudpickle.dumps(script["write_partition"])
    assert b"_WRITERS" not in cloudpickle.dumps(spark_runtime.write_partition)
