"""A Spark streaming source that reads Kafka with confluent-kafka: ``format("chaoslab-kafka")``.

The Spark runtime reads Kafka through this Python data source (until it moves to Spark's own
Kafka connector)::

    register(spark)
    stream = (
        spark.readStream.format("chaoslab-kafka")
        .option("bootstrap", env.kafka_bootstrap)
        .option("topic", "orders")
        .option("maxRecordsPerTrigger", 500)  # optional: records per micro-batch, all partitions
        .load()
    )

Rows: ``topic string, partition int, offset long, key binary, value binary, timestamp long``
(milliseconds). Offsets are ``{"<partition>": next offset to read}``; Spark keeps them in the
query's checkpoint, so a restarted query goes on where its last committed batch ended (and
replays an uncommitted one with the same offsets). Nothing is committed to Kafka.

End offsets are the partitions' high watermarks (``harness.kafka.Watermarks``).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, Message, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from harness.kafka import CONSUMER_CLIENT, Watermarks, consumer_config, partition_offset
from harness.readiness import wait_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "chaoslab-kafka"
SCHEMA = "topic string, partition int, offset long, key binary, value binary, timestamp long"
# librdkafka insists on a group id even for assign()-only consumers; this one never joins a
# group and never commits, so it cannot disturb anyone's committed offsets.
GROUP = "chaoslab-spark-source"
# How long a read or a planning call keeps retrying without progress (e.g. while the broker is
# bounced) before failing the query.
STALL_TIMEOUT_S = 120.0

Offsets = dict[str, int]  # {"<partition>": next offset}; JSON object keys are strings
Record = tuple[str, int, int, bytes | None, bytes | None, int | None]


class KafkaSourceOptionError(ValueError):
    """An option of the chaoslab-kafka source is missing or invalid."""


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    topic: str
    max_records_per_trigger: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        # Spark hands over a case-insensitive mapping; a plain dict should behave the same.
        lowered = {key.lower(): str(value).strip() for key, value in options.items()}
        limit = lowered.get("maxrecordspertrigger")
        return cls(
            bootstrap=_required(lowered, "bootstrap", "the Kafka bootstrap servers, host:port"),
            topic=_required(lowered, "topic", "the Kafka topic to read"),
            max_records_per_trigger=None if limit is None else _positive_int(limit),
        )


def _required(options: Mapping[str, str], name: str, meaning: str) -> str:
    value = options.get(name.lower())
    if not value:
        raise KafkaSourceOptionError(f"{NAME}: option '{name}' is required ({meaning})")
    return value


def _positive_int(text: str) -> int:
    name = "maxRecordsPerTrigger"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise KafkaSourceOptionError(
            f"{NAME}: option '{name}' must be a positive integer: {text!r}"
        )
    return value


class KafkaDataSource(DataSource):
    """``spark.readStream.format("chaoslab-kafka")``: see the module's documentation."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self.settings)


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches from Kafka's end offsets and reads each partition's range.

    Spark calls the planning methods (``initialOffset``, ``latestOffset``, ``partitions``,
    ``commit``, ``stop``) on one long-lived instance in a driver-side Python process, and
    ``read`` on pickled copies in Python workers.
    """

    def __init__(self, settings: SourceOptions) -> None:
        self.settings = settings
        # Made on first use by the planner: a consumer cannot be pickled, and workers need none.
        self._watermarks: Watermarks | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_watermarks": None}

    def initialOffset(self) -> Offsets:
        """Every partition from offset 0: the lab never deletes data."""
        highs = self._end_offsets()
        if not highs:
            raise KafkaSourceOptionError(
                f"{NAME}: topic {self.settings.topic!r} (option 'topic') does not exist at "
                f"{self.settings.bootstrap}"
            )
        return _encode(dict.fromkeys(highs, 0))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.settings.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The end of the next micro-batch: what exists, at most ``limit`` rows past ``start``."""
        begin = _decode(start)
        highs = self._end_offsets()
        every = sorted(begin.keys() | highs.keys())
        # Never behind ``start``, even if the broker answered with less than it had before.
        available = {p: max(0, highs.get(p, 0) - begin.get(p, 0)) for p in every}
        budget = _row_budget(limit)
        if budget is not None:
            available = fair_share(available, budget, rotation=sum(begin.values()))
        return _encode({p: begin.get(p, 0) + available[p] for p in every})

    def reportLatestOffset(self) -> Offsets | None:
        known = self._watermarks.last if self._watermarks is not None else None
        return _encode(known) if known else None

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaRange]:
        """One range per Kafka partition that has records between ``start`` and ``end``."""
        begin, finish = _decode(start), _decode(end)
        ranges = [
            KafkaRange(self.settings.topic, p, begin.get(p, 0), stop)
            for p, stop in sorted(finish.items())
        ]
        return [r for r in ranges if r.end > r.start]

    def read(self, partition: InputPartition) -> Iterator[Record]:
        """The records of one range; its consumer is closed when the iterator ends."""
        assert isinstance(partition, KafkaRange), partition
        return read_range(self.settings.bootstrap, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, and Kafka keeps all data.

        Spark calls this once the batch ending at ``end`` is in its commit log (when it plans
        the next batch). Committing to a Kafka consumer group here would add a second, possibly
        disagreeing record of progress.
        """

    def stop(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()
            self._watermarks = None

    def _end_offsets(self) -> dict[int, int]:
        """Each partition's high watermark; retried through a broker bounce until a deadline."""
        if self._watermarks is None:
            self._watermarks = Watermarks(
                self.settings.bootstrap,
                self.settings.topic,
                group=GROUP,
                client_id=f"{CONSUMER_CLIENT}-spark-planner",  # on the consumer's link
            )
        watermarks = self._watermarks
        return wait_for(
            lambda: watermarks.read(timeout=10.0),
            what=f"{NAME}: end offsets of topic {self.settings.topic!r} at "
            f"{self.settings.bootstrap}",
            timeout=STALL_TIMEOUT_S,
        )


def _row_budget(limit: ReadLimit) -> int | None:
    if isinstance(limit, ReadAllAvailable):
        return None
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    raise ValueError(f"{NAME}: unsupported read limit {limit!r}")


def fair_share(available: Mapping[int, int], budget: int, *, rotation: int = 0) -> dict[int, int]:
    """Split ``budget`` rows over partitions holding ``available`` rows, as evenly as they allow.

    Each round gives every partition that still has rows an equal share; what a partition cannot
    use goes to the others in the next round. When fewer rows than partitions remain, they go
    one each to the partitions from position ``rotation`` on: pass a value that grows with the
    rows handed out (the sum of the start offsets) and the remainders rotate, so a small budget
    cannot starve a partition.
    """
    taken = dict.fromkeys(available, 0)
    while budget > 0:
        open_ = [p for p in sorted(available) if available[p] > taken[p]]
        if not open_:
            break
        share = budget // len(open_)
        if share == 0:
            first = rotation % len(open_)
            for p in (open_[first:] + open_[:first])[:budget]:
                taken[p] += 1
            break
        for p in open_:
            extra = min(share, available[p] - taken[p])
            taken[p] += extra
            budget -= extra
    return taken


def read_range(
    bootstrap: str,
    part: KafkaRange,
    *,
    stall_timeout: float = STALL_TIMEOUT_S,
    **consumer_overrides: Any,
) -> Generator[Record, None, None]:
    """Yield the records of ``part`` in offset order, retrying through broker bounces.

    Fails if no record arrives for ``stall_timeout`` seconds. The consumer is closed when the
    iterator is exhausted or closed.
    """
    settings = {
        "enable.partition.eof": True,
        # The range ends at the high watermark, which counts uncommitted transactional records.
        "isolation.level": "read_uncommitted",
        "enable.auto.offset.store": False,
        **consumer_overrides,
    }
    consumer = Consumer(
        consumer_config(bootstrap, GROUP, **{"client.id": f"{CONSUMER_CLIENT}-spark", **settings})
    )
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        yield from _consume_until_end(consumer, part, stall_timeout)
    finally:
        consumer.close()


def _consume_until_end(
    consumer: Consumer, part: KafkaRange, stall_timeout: float
) -> Iterator[Record]:
    position = part.start
    deadline = time.monotonic() + stall_timeout
    last_error: KafkaError | None = None
    while position < part.end:
        if time.monotonic() > deadline:
            raise RuntimeError(_stalled(part, position, stall_timeout, last_error))
        batch = consumer.consume(num_messages=min(part.end - position, 10_000), timeout=0.1)
        for msg in batch:
            error = msg.error()
            if error is not None:
                if (
                    error.code() == KafkaError._PARTITION_EOF
                    and partition_offset(msg)[1] >= part.end
                ):
                    position = part.end  # the range ends in offsets with no record (markers)
                elif error.code() != KafkaError._PARTITION_EOF:
                    last_error = error  # librdkafka reconnects and refetches on its own
                continue
            offset = msg.offset()
            assert offset is not None  # every consumed record has one
            if offset >= part.end:
                position = part.end
                break
            if offset >= position:  # below: fetched again after an offset reset
                yield _record(part, msg, offset)
                position = offset + 1
                deadline = time.monotonic() + stall_timeout


def _record(part: KafkaRange, msg: Message, offset: int) -> Record:
    kind, ms = msg.timestamp()
    return (
        part.topic,
        part.partition,
        offset,
        msg.key(),
        msg.value(),
        None if kind == TIMESTAMP_NOT_AVAILABLE else ms,
    )


def _stalled(part: KafkaRange, position: int, timeout: float, error: KafkaError | None) -> str:
    cause = f"; last error: {error}" if error is not None else ""
    return (
        f"{NAME}: reading {part.topic}[{part.partition}] offsets {part.start}..{part.end} made "
        f"no progress for {timeout:.0f} s at offset {position}{cause}"
    )


def _decode(offsets: Mapping[str, int]) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.items()}


def _encode(offsets: Mapping[int, int]) -> Offsets:
    # Spark compares offsets as JSON text: always list partitions in the same (numeric) order.
    return {str(p): offsets[p] for p in sorted(offsets)}


def register(spark: SparkSession) -> None:
    """Make ``format("chaoslab-kafka")`` available in ``spark``."""
    spark.dataSource.register(KafkaDataSource)
