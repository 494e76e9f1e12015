"""MongoDB's Spark connector in the Spark runtime (harness.pipeline.spark.connector): the
mid_write plans armed where the lab's Spark hooks read them, a query's checkpoint read for a
batch's records, the hold of its entries - and, in a Spark session against the lab's MongoDB,
that the connector refuses exactly the values the lab refuses before a run, in the words the
lab quotes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from harness.environment.local import LocalEnvironment
from harness.history.events import HistoryWriter
from harness.pipeline.crash import Crasher, CrashPlan, CrashPoint, Struck
from harness.pipeline.spark.connector import (
    ARMED,
    CheckpointHold,
    MidWrite,
    batch_range,
    next_batch,
)
from harness.pipeline.variants import make_variant
from harness.readiness import NotReady, wait_for
from tests.support import SPARK


def mid_write(tmp_path: Path, **plan: object) -> tuple[MidWrite, Path]:
    crashes = tmp_path / "crashes"
    history = HistoryWriter(tmp_path / "history", "spark", "connector-sink")
    fields = {"point": CrashPoint.MID_WRITE, "after_docs": 40, "name": "executor-loss#1", **plan}
    crasher = Crasher([CrashPlan(**fields)], crashes, history)  # type: ignore[arg-type]
    return MidWrite(crasher, crashes), crashes


def test_a_plan_is_armed_in_its_batch_and_settled_once_the_hooks_fired_it(tmp_path: Path) -> None:
    armed, crashes = mid_write(tmp_path, at_batch=2, strikes=Struck.EXECUTOR)
    armed.arm(batch_no=1, batch_id=10)
    assert not (crashes / ARMED).exists()  # nothing due in the process's first batch
    armed.arm(batch_no=2, batch_id=11)
    # As the hooks read it: index, nth, after_docs, strikes, pause ('' a kill), batch, name.
    assert (crashes / ARMED).read_text() == "0\t1\t40\texecutor\t\t11\texecutor-loss#1\n"
    # A write task of the batch reached 40 documents and claimed the firing (Watch.java).
    (crashes / "crash-0-mid_write.fired-1").touch()
    armed.settle()
    assert not (crashes / ARMED).exists()
    armed.arm(batch_no=3, batch_id=12)
    assert not (crashes / ARMED).exists()  # fired its one time


def test_a_plan_no_task_reached_stays_armed_for_the_next_batch(tmp_path: Path) -> None:
    armed, crashes = mid_write(tmp_path, at_batch=1, pause_s=5.0)
    armed.arm(batch_no=1, batch_id=0)
    armed.settle()  # the batch's tasks wrote fewer than 40 documents each
    armed.arm(batch_no=2, batch_id=1)
    assert (crashes / ARMED).read_text() == "0\t1\t40\tconsumer\t5\t1\texecutor-loss#1\n"


def checkpoint(root: Path, topic: str, offsets: list[dict[int, int]], committed: int) -> str:
    """A query's checkpoint as Spark 4 writes one for the Kafka source: the source's initial
    offsets, an offset-log entry per batch, a commit-log entry per committed batch."""
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_text(f'v1\n{{"{topic}":{{"0":0,"1":0}}}}')
    (root / "offsets").mkdir()
    (root / "commits").mkdir()
    for batch, ends in enumerate(offsets):
        source = json.dumps({topic: {str(p): o for p, o in ends.items()}})
        (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{source}')
    for batch in range(committed):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return str(root)


def test_a_batchs_records_are_read_from_the_checkpoint(tmp_path: Path) -> None:
    ends = [{0: 70, 1: 64}, {0: 140, 1: 130}]
    root = checkpoint(tmp_path / "q", "t", ends, committed=1)
    assert batch_range(root, "t", 0) == ({0: 0, 1: 0}, ends[0])
    assert batch_range(root, "t", 1) == (ends[0], ends[1])
    # Batch 1 was planned and not committed: a query started from here runs it again.
    assert next_batch(root) == 1
    (Path(root) / "commits" / "1").write_text("v1\n{}")
    assert next_batch(root) == 2


def test_an_entry_is_held_until_the_driver_has_seen_it(tmp_path: Path) -> None:
    seen: list[tuple[str, int, bool]] = []
    folder = tmp_path / "q" / "chaoslab-hold"

    def on_entry(kind: str, batch: int) -> None:
        seen.append((kind, batch, (folder / f"{kind}-{batch}.go").exists()))

    hold = CheckpointHold(str(tmp_path / "q"), on_entry)
    hold.start()
    try:

        def spark_writes(entry: str) -> None:  # as HeldCheckpointFileManager does
            (folder / f"{entry}.reached").touch()
            go = folder / f"{entry}.go"

            def let_go() -> None:
                if not go.exists():
                    raise NotReady(f"{entry} held")

            wait_for(let_go, what=f"{entry} let go", timeout=10, interval=0.002)
            go.unlink()
            (folder / f"{entry}.reached").unlink()

        for entry in ("offsets-3", "commits-3"):
            writer = threading.Thread(target=spark_writes, args=(entry,))
            writer.start()
            writer.join(timeout=20)
            assert not writer.is_alive()
    finally:
        hold.stop()
    # Each seen before it was let go: a crash point there comes before Spark writes it.
    assert seen == [("offsets", 3, False), ("commits", 3, False)]


# The connector's own refusals, in a session of the lab's (its jars, its MongoDB): each write
# of one row with one bad option, and what the connector said. The row has an _id, so that it
# takes the replace path: the connector reads upsertDocument only for a row it replaces or
# updates (a row it inserts never meets a bad value of it).
REFUSALS = textwrap.dedent(
    """
    import json, sys
    from harness.environment.spark import SparkSettings, spark_session

    settings, uri = SparkSettings.from_json(sys.argv[1]), sys.argv[2]
    cases = json.loads(sys.argv[3])
    spark = spark_session(settings, "connector-refusals")
    said = {}
    for key, value in cases:
        try:
            (spark.createDataFrame([("e-1", 1)], ["_id", "order_id"]).write.format("mongodb")
             .mode("append").option("connection.uri", uri).option("database", "refusals")
             .option("collection", "events").option(key, value).save())
            said[key] = ""
        except Exception as exc:
            said[key] = str(exc)
    print(json.dumps(said))
    spark.stop()
    """
)
BAD = [
    ("operationType", "upsert"),
    ("maxBatchSize", "abc"),
    ("ordered", "yes"),
    ("upsertDocument", "maybe"),
    ("writeConcern.journal", "maybe"),
    ("writeConcern.wTimeoutMS", "abc"),
    ("writeConcern.w", "-1"),
    ("convertJson", "sometimes"),
]


@pytest.mark.servers
@SPARK
def test_the_connector_refuses_what_the_lab_refuses_in_the_words_it_quotes(
    lab_env: LocalEnvironment,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", REFUSALS, lab_env.spark.to_json(), lab_env.mongo_uri,
         json.dumps(BAD)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    for key, value in BAD:
        with pytest.raises(Exception) as lab:
            make_variant("connector-batch", {key: value})
        quoted = str(lab.value).split(f"{key}: ", 1)[1]
        # The lab's words are the connector's, up to the choices the lab adds in brackets.
        words = quoted.split(" (one of ")[0]
        words = words.removeprefix("Invalid write concern configuration. (").rstrip(")")
        assert said[key], f"the connector took {key}={value}"
        assert words in said[key], (key, words, said[key][:500])
