"""The chaoslab-kafka Spark source: offsets planned from the real broker's watermarks, batches
bounded and fair, every record delivered once, restarts resuming from the checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from harness.environment import LocalEnvironment
from harness.environment.process import ProcessHandle
from harness.kafka import create_topic, end_offsets, producer_config
from harness.pipeline.kafka_source import (
    KafkaDataSource,
    KafkaRange,
    KafkaSourceOptionError,
    KafkaStreamReader,
    Record,
    fair_share,
    read_range,
)
from harness.readiness import NotReady, wait_for
from tests.support import SPARK, server_handles, unique

Produced = dict[tuple[int, int], tuple[str, str]]  # (partition, offset) -> (key, value)
UNEVEN = (0, 0, 0, 1, 1, 2)  # partition 0 gets 3 of every 6 records, partition 2 one

# Runs in a fresh process, as the Spark runtime will. argv: settings, job (JSON). Runs the query
# in job until it has seen offset end-1 of every partition in job["ends"]; appends one JSON line
# per batch to job["out"] (before foreachBatch returns, i.e. before the batch is committed) and
# prints "ran". With job["fail_at"], foreachBatch fails after writing that batch, which ends the
# query (the batch is planned but not committed). Then, for each line on stdin, runs the query
# again (a restart from the same checkpoint) with the job's keys changed as the line says.
QUERY = textwrap.dedent(
    """
    import json, sys, threading, time
    from harness.environment import SparkSettings, spark_session
    from harness.pipeline.kafka_source import register

    def run(spark, job):
        last = {int(p): end - 1 for p, end in (job.get("ends") or {}).items()}
        seen, done = {}, threading.Event()

        def each(df, batch_id):
            rows = df.collect()
            records = [
                [r.partition, r.offset, r.key.decode(), r.value.decode(), r.timestamp, r.topic]
                for r in rows
            ]
            with open(job["out"], "a") as out:
                out.write(json.dumps({"batch": batch_id, "records": records}) + "\\n")
            for r in rows:
                seen[r.partition] = max(seen.get(r.partition, -1), r.offset)
            if batch_id == job.get("fail_at"):
                done.set()
                raise RuntimeError(f"failure injected into batch {batch_id}")
            if last and all(seen.get(p, -1) >= o for p, o in last.items()):
                done.set()

        stream = (
            spark.readStream.format("chaoslab-kafka")
            .option("bootstrap", job["bootstrap"])
            .option("topic", job["topic"])
            .option("maxRecordsPerTrigger", job["limit"])
            .load()
        )
        query = stream.writeStream.foreachBatch(each).option(
            "checkpointLocation", job["checkpoint"]
        ).start()
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            try:
                if query.awaitTermination(0.2):
                    break
            except Exception:  # the injected failure, or the test fails on what went wrong
                break
        query.stop()
        failed = query.exception() is not None
        if not done.is_set() or failed != (job.get("fail_at") is not None):
            sys.exit(f"the query did not run as planned: {query.exception()}")
        print("ran", flush=True)

    settings, job = SparkSettings.from_json(sys.argv[1]), json.loads(sys.argv[2])
    spark = spark_session(settings, "kafka-source-test")
    register(spark)
    if job.get("without_topic"):
        try:
            spark.readStream.format("chaoslab-kafka").option("bootstrap", job["bootstrap"]).load()
            print(json.dumps({"error": None}), flush=True)
        except Exception as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
    run(spark, job)
    for line in sys.stdin:
        run(spark, {**job, **json.loads(line)})
    spark.stop()
    """
)


def run_query(
    lab_env: LocalEnvironment,
    job: Mapping[str, Any],
    then: Callable[[], Mapping[str, Any]] | None = None,
) -> list[str]:
    """Run QUERY in a child process; if ``then`` is given, call it once the query has run and
    restart the query with the changes it returns. Return what the child printed."""
    with tempfile.TemporaryFile("w+") as errors:
        args = [sys.executable, "-c", QUERY, lab_env.spark.to_json(), json.dumps(job)]
        child = subprocess.Popen(args, stdin=PIPE, stdout=PIPE, stderr=errors, text=True)
        assert child.stdin is not None and child.stdout is not None
        try:
            printed = until_ran(child.stdout)
            if then is not None and printed[-1:] == ["ran"]:
                child.stdin.write(json.dumps(then()) + "\n")
                child.stdin.flush()
                printed += until_ran(child.stdout)
            child.stdin.close()
            returncode = child.wait(timeout=120)
        finally:
            if child.poll() is None:
                child.terminate()
                child.wait()
        errors.seek(0)
        # Without the JVM's stack frames: the Python traceback is what says what went wrong.
        said = "".join(line for line in errors if not line.lstrip().startswith("at "))
        assert returncode == 0, said[-4000:]
    return printed


def until_ran(stdout: IO[str]) -> list[str]:
    """Lines up to and including "ran" (or to the end, if the child failed first)."""
    lines = []
    for line in stdout:
        lines.append(line.strip())
        if lines[-1] == "ran":
            break
    return lines


def read_batches(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def key_and_value(record: Record) -> tuple[str, str]:
    """A record's (key, value), decoded: every record ``produce`` writes has both."""
    key, value = record[3], record[4]
    assert key is not None and value is not None, record
    return key.decode(), value.decode()


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    first: int = 0,
    spread: tuple[int, ...] = UNEVEN,
    flush_every: int | None = None,
) -> Produced:
    """Produce records ``first`` to ``first + count`` to the partitions in ``spread``, in turn
    (flushing every ``flush_every`` records: one record batch each); return what was acked."""
    acked: Produced = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[(msg.partition(), msg.offset())] = (msg.key().decode(), msg.value().decode())

    producer = Producer(producer_config(bootstrap))
    for i in range(first, first + count):
        partition = spread[i % len(spread)]
        producer.produce(topic, f"m{i}", f"k{i}", partition=partition, on_delivery=on_delivery)
        producer.poll(0)
        if flush_every and (i - first + 1) % flush_every == 0:
            producer.flush(60)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return acked


def stream_reader(bootstrap: str, topic: str, **options: str) -> KafkaStreamReader:
    source = KafkaDataSource({"bootstrap": bootstrap, "topic": topic, **options})
    return source.streamReader(source.schema())  # type: ignore[arg-type]


def acked_ends(acked: Produced, partitions: int) -> dict[int, int]:
    """The end offset of each partition according to the producer's delivery reports."""
    ends = dict.fromkeys(range(partitions), 0)
    for partition, offset in acked:
        ends[partition] = max(ends[partition], offset + 1)
    return ends


def as_ints(offsets: Mapping[str, int]) -> dict[int, int]:
    return {int(p): o for p, o in offsets.items()}


# -- the source's parts, without Spark ----------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"bootstrap": "127.0.0.1:9092"}, "'topic' is required"),
        ({"topic": "t"}, "'bootstrap' is required"),
        ({"bootstrap": "b", "topic": " "}, "'topic' is required"),
        ({"bootstrap": "b", "topic": "t", "maxRecordsPerTrigger": "0"}, "'maxRecordsPerTrigger'"),
        ({"bootstrap": "b", "topic": "t", "maxRecordsPerTrigger": "ten"}, "'maxRecordsPerTrigger'"),
    ],
)
def test_missing_or_invalid_options_are_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(KafkaSourceOptionError, match=named):
        KafkaDataSource(options)


def test_option_names_are_case_insensitive() -> None:
    source = KafkaDataSource({"BOOTSTRAP": "b:1", "Topic": "t", "maxrecordspertrigger": "7"})
    reader = source.streamReader(source.schema())  # type: ignore[arg-type]
    assert reader.getDefaultReadLimit() == ReadMaxRows(7)
    assert stream_reader("b:1", "t").getDefaultReadLimit() == ReadAllAvailable()


def test_fair_share_splits_evenly_and_passes_on_what_a_partition_cannot_use() -> None:
    assert fair_share({0: 1000, 1: 1000, 2: 1000}, 500) == {0: 167, 1: 167, 2: 166}
    assert fair_share({0: 1000, 1: 10, 2: 1000}, 500) == {0: 245, 1: 10, 2: 245}
    assert fair_share({0: 5, 1: 0, 2: 3}, 500) == {0: 5, 1: 0, 2: 3}
    assert fair_share({0: 7, 1: 7}, 0) == {0: 0, 1: 0}


def test_fair_share_rotates_remainders_so_no_partition_starves() -> None:
    available, start = {0: 100, 1: 100, 2: 100, 3: 100}, 0
    served: list[set[int]] = []
    for _ in range(4):
        taken = fair_share(available, 2, rotation=start)
        assert sum(taken.values()) == 2
        served.append({p for p, n in taken.items() if n})
        start += 2
        available = {p: a - taken[p] for p, a in available.items()}
    assert served == [{0, 1}, {2, 3}, {0, 1}, {2, 3}]


@pytest.mark.servers
def test_planning_sees_new_records_at_once_and_never_beyond_the_end(
    lab_env: LocalEnvironment,
) -> None:
    bootstrap, topic = lab_env.kafka_bootstrap, unique("plan")
    create_topic(bootstrap, topic, 3)
    reader = stream_reader(bootstrap, topic)
    try:
        start = reader.initialOffset()
        assert start == {"0": 0, "1": 0, "2": 0}
        assert reader.latestOffset(start, ReadAllAvailable()) == start
        acked: Produced = {}
        for count in (1, 5, 2, 60, 1, 7):
            acked |= produce(bootstrap, topic, count, first=len(acked))
            # The same long-lived planner consumer, straight after the producer's acks.
            latest = as_ints(reader.latestOffset(start, ReadAllAvailable()))
            assert latest == acked_ends(acked, partitions=3)

        capped = as_ints(reader.latestOffset(start, ReadMaxRows(10)))
        assert sum(capped.values()) == 10 and all(capped[p] <= latest[p] for p in capped)
        done = {str(p): o for p, o in latest.items()}
        assert reader.latestOffset(done, ReadMaxRows(10)) == done
    finally:
        reader.stop()


@pytest.mark.servers
def test_a_missing_topic_is_named(lab_env: LocalEnvironment) -> None:
    reader = stream_reader(lab_env.kafka_bootstrap, "no-such-topic")
    try:
        with pytest.raises(KafkaSourceOptionError, match=r"'no-such-topic'.*does not exist"):
            reader.initialOffset()
    finally:
        reader.stop()


@pytest.mark.servers
def test_read_and_planning_ride_out_a_broker_bounce(lab_env: LocalEnvironment) -> None:
    bootstrap, topic = lab_env.kafka_bootstrap, unique("bounce")
    create_topic(bootstrap, topic, 1)
    produced = produce(bootstrap, topic, 3000, spread=(0,), flush_every=100)
    ends = end_offsets(bootstrap, topic)
    reader = stream_reader(bootstrap, topic)
    rows = read_range(
        bootstrap,
        KafkaRange(topic, 0, 0, ends[0]),
        # One record batch per Fetch (~20 ms each): most of them come after the bounce.
        **{"fetch.max.bytes": 1024, "message.max.bytes": 1000},
    )
    try:
        start = reader.initialOffset()
        got = [next(rows)]  # connected and fetching

        node = server_handles(lab_env.directory)["kafka-1"]
        # Every node at once: no leader anywhere until they are back.
        bounce = threading.Thread(target=lab_env.restart_broker, kwargs={"hard": True})
        bounce.start()
        wait_for(lambda: gone(node), what="the cluster's end", timeout=30)
        got += list(rows)  # the cluster is down or starting: the read has to wait it out
        bounce.join(timeout=180)
        assert not bounce.is_alive()

        assert [r[2] for r in got] == list(range(ends[0]))
        assert {(r[1], r[2]): key_and_value(r) for r in got} == produced
        assert sum(as_ints(reader.latestOffset(start, ReadAllAvailable())).values()) == ends[0]
    finally:
        rows.close()
        reader.stop()


def gone(process: ProcessHandle) -> None:
    if process.alive():
        raise NotReady(f"process {process.pid} still runs")


@pytest.mark.servers
def test_a_read_that_cannot_finish_fails_with_a_clear_message(lab_env: LocalEnvironment) -> None:
    bootstrap, topic = lab_env.kafka_bootstrap, unique("short")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5, spread=(0,))
    beyond = KafkaRange(topic, 0, 2, 9)  # offsets 5..8 do not exist
    with pytest.raises(RuntimeError, match=r"offsets 2\.\.9 made no progress for 1 s at offset 5"):
        list(read_range(bootstrap, beyond, stall_timeout=1.0))


# -- through Spark --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def first_query(lab_env: LocalEnvironment, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """3,000 records through a query with maxRecordsPerTrigger=500 (and, before it, an attempt
    to load the source without a topic)."""
    bootstrap, topic = lab_env.kafka_bootstrap, unique("spark")
    create_topic(bootstrap, topic, 3)
    produced = produce(bootstrap, topic, 3000)
    out = tmp_path_factory.mktemp("first-query") / "batches.jsonl"
    job = {
        "bootstrap": bootstrap,
        "topic": topic,
        "limit": 500,
        "ends": end_offsets(bootstrap, topic),
        "checkpoint": lab_env.spark.checkpoint(topic),
        "out": str(out),
        "without_topic": True,
    }
    printed = run_query(lab_env, job)
    return {"produced": produced, "batches": read_batches(out), "printed": printed, "job": job}


@pytest.mark.servers
@SPARK
def test_spark_reads_every_record_once_in_bounded_fair_batches(first_query: dict) -> None:
    produced: Produced = first_query["produced"]
    batches = first_query["batches"]
    topic = first_query["job"]["topic"]

    assert [b["batch"] for b in batches] == list(range(len(batches))), "batches skipped or replayed"
    assert len(batches) > 1
    assert all(len(b["records"]) <= 500 for b in batches), [len(b["records"]) for b in batches]
    delivered = [(r[0], r[1]) for b in batches for r in b["records"]]
    assert len(delivered) == len(set(delivered)), "a record was delivered twice"
    assert set(delivered) == set(produced)
    for b in batches:
        for partition, offset, key, value, timestamp, record_topic in b["records"]:
            assert (key, value) == produced[(partition, offset)]
            assert record_topic == topic and timestamp > 1_600_000_000_000
    assert_fair(batches, first_query["job"]["ends"])


def assert_fair(batches: list[dict], ends: dict[int, int]) -> None:
    """Every partition with records left gets a share of every batch of 500."""
    left = dict(ends)
    for b in batches:
        counts = {p: 0 for p in left}
        for partition, *_ in b["records"]:
            counts[partition] += 1
        behind = [p for p in left if left[p] > 0]
        assert all(counts[p] >= min(left[p], 500 // len(behind)) for p in behind), (
            b["batch"],
            counts,
            left,
        )
        left = {p: left[p] - counts[p] for p in left}


@pytest.mark.servers
@SPARK
def test_spark_names_the_missing_option(first_query: dict) -> None:
    error = json.loads(first_query["printed"][0])["error"]
    assert error is not None, "loading without a topic did not fail"
    assert "chaoslab-kafka: option 'topic' is required" in error


@pytest.mark.servers
@SPARK
def test_a_restarted_query_resumes_after_its_last_committed_batch(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    bootstrap, topic = lab_env.kafka_bootstrap, unique("restart")
    create_topic(bootstrap, topic, 3)
    produced = produce(bootstrap, topic, 1500)
    checkpoint = Path(lab_env.spark.checkpoint(topic))
    job = {"bootstrap": bootstrap, "topic": topic, "limit": 400, "checkpoint": str(checkpoint)}
    between: dict[str, Any] = {}

    def restart() -> dict[str, Any]:
        """After the first run: note what it committed, then produce more."""
        between["committed"] = last_committed(checkpoint)
        between["produced"] = produce(bootstrap, topic, 600, first=1500)
        ends = end_offsets(bootstrap, topic)
        return {"out": str(tmp_path / "second.jsonl"), "fail_at": None, "ends": ends}

    # The first run fails in batch 2, after handing its records on: planned, not committed.
    first_run = {**job, "out": str(tmp_path / "first.jsonl"), "fail_at": 2}
    assert run_query(lab_env, first_run, then=restart) == ["ran", "ran"]
    produced |= between["produced"]
    first = read_batches(tmp_path / "first.jsonl")
    second = read_batches(tmp_path / "second.jsonl")
    assert [b["batch"] for b in first] == [0, 1, 2] and between["committed"] == 1

    # The restarted query replays batch 2 with the same records, starting where batch 1 ended.
    assert second[0]["batch"] == 2 and second[0]["records"] == first[2]["records"]
    starts: dict[int, int] = {}
    for partition, offset, *_ in second[0]["records"]:
        starts[partition] = min(starts.get(partition, offset), offset)
    batch_1_end = planned_end(checkpoint, 1)
    assert starts and starts == {p: batch_1_end[p] for p in starts}, (starts, batch_1_end)
    assert [b["batch"] for b in second] == list(range(2, 2 + len(second)))

    seen = [(r[0], r[1]) for b in first + second for r in b["records"]]
    assert set(seen) == set(produced), "a record was lost across the restart"
    assert len(seen) - len(set(seen)) == len(first[2]["records"]), "more than batch 2 replayed"


def last_committed(checkpoint: Path) -> int:
    return max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())


def planned_end(checkpoint: Path, batch: int) -> dict[int, int]:
    """The source's end offsets for ``batch``, from the checkpoint's offset log."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return as_ints(json.loads(lines[-1]))
