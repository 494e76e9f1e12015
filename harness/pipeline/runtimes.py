"""The runtimes the lab runs consumers on, as registered records (papermill's ``engines.py``
registry is the model): everything the harness needs to know about one - how it is launched,
how many processes a variant gets, how a commit failure reaches it, whether it is Spark - is
said here once, and nowhere else compares a runtime's name. The listed runtimes run a scenario's
variants over its topic (its ``runtimes:``); the relay runs an outbox scenario's relays; a
command consumer brings the command runtime with it.

A runtime's own code runs in its processes (``python -m MODULE``); this module names the module
and never imports it, so the harness does not load pyspark to run listeners.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from harness.history.events import EventKind


class CommitFailureVia(StrEnum):
    """How a ``commit-failure`` fault reaches a runtime's commits."""

    # The fault proxy answers the consumers' OffsetCommit with the scenario's error code (an
    # emulation of a broker's answer: said so wherever it is reported).
    PROXY = "proxy"
    # The nemesis makes the query's checkpoint commit log unwritable (``environment.readonly``):
    # Spark's own write of each batch's commit fails, after the batch was written.
    CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class Runtime:
    name: str
    # A scenario lists it in ``runtimes:`` and runs its sink variants on it.
    listed: bool
    module: str  # python -m MODULE RUNTIME.JSON... [INDEX]
    # True: each variant gets ``pipeline.consumers`` processes of its own, each given its index
    # (a listener container's concurrency). False: one process per variant, or one for several
    # variants when no fault targets a single consumer process (a Spark driver).
    process_per_consumer: bool
    # A member of a Kafka consumer group: its client logs hold the coordinators' errors, which
    # are harvested into the history after the run.
    group_member: bool
    commit_failure: CommitFailureVia
    spark: bool  # needs the environment's Spark: session settings and a checkpoint directory
    # Reads only committed records of a transactional producer (isolation.level=read_committed).
    read_committed: bool
    # The event a consumer writes once it can consume: the workload starts when every lane of a
    # run has written it, so a fault's time means the same on every runtime side by side.
    ready: EventKind
    # A user's program the lab only starts, signals and watches from outside: no crash point
    # inside it, no batch in its history - the lab records what it sees (harness.pipeline.observer).
    black_box: bool = False
    # Its processes are a Kafka Connect cluster's workers, which every lane of the runtime in a
    # run shares: each lane is a connector on it (``harness.pipeline.connect.settings``).
    connect: bool = False


LISTENER = Runtime(
    name="listener",
    listed=True,
    module="harness.pipeline.listener.consumer",
    process_per_consumer=True,
    group_member=True,
    commit_failure=CommitFailureVia.PROXY,
    spark=False,
    read_committed=True,
    ready=EventKind.ASSIGNED,  # the group gave it partitions
)
SPARK = Runtime(
    name="spark",
    listed=True,
    module="harness.pipeline.spark.runtime",
    process_per_consumer=False,
    group_member=False,  # its Kafka source assigns partitions and keeps offsets in a checkpoint
    commit_failure=CommitFailureVia.CHECKPOINT,
    spark=True,
    # Spark's Kafka source reads with its default isolation (read_uncommitted); the lab has not
    # measured it with kafka.isolation.level=read_committed.
    read_committed=False,
    ready=EventKind.RUNTIME_START,  # the driver writes it once its queries started
)

# Seed 003's way back: one process per relay lane reads MongoDB's change stream into Kafka.
RELAY = Runtime(
    name="relay",
    listed=False,
    module="harness.outbox.relay",
    process_per_consumer=True,
    group_member=False,
    commit_failure=CommitFailureVia.PROXY,
    spark=False,
    read_committed=True,
    ready=EventKind.RUNTIME_START,  # the relay writes it once its change stream is open
)

# A command consumer (``harness.pipeline.variants.command``): any program, in any language, run
# with the lab's environment variables. A variant of that kind brings this runtime with it; a
# scenario never lists it.
COMMAND = Runtime(
    name="command",
    listed=False,
    module="",  # the variant's own command is run
    process_per_consumer=True,
    group_member=False,  # its log is its own: error lines are read as it runs, not parsed after
    commit_failure=CommitFailureVia.PROXY,
    spark=False,
    read_committed=False,  # its own setting, which the lab cannot see
    ready=EventKind.ASSIGNED,  # written by the lab once the group has every instance assigned
    black_box=True,
)

# A Kafka Connect cluster running sink connectors (``harness.pipeline.variants.connect``): a
# variant of that kind brings this runtime with it. The run's Connect lanes share its workers,
# each a process the lab starts, kills and restarts; the connectors run inside them, where the
# lab sees them only through Connect's REST API and their group's commits.
CONNECT = Runtime(
    name="connect",
    listed=False,
    module="harness.pipeline.connect.worker",
    process_per_consumer=True,  # each worker is given its index
    group_member=False,  # the workers' logs are read as they run (harness.pipeline.observer)
    commit_failure=CommitFailureVia.PROXY,  # the sink tasks' consumers commit through the proxy
    spark=False,
    read_committed=False,  # Connect's consumers read with Kafka's default isolation
    ready=EventKind.ASSIGNED,  # written by the lab once the connector's group is stable
    black_box=True,
    connect=True,
)

# A CDC source's own Connect cluster, running Debezium (``harness.run.sources``): not a lane's.
# The lab follows its connector through REST and its topic; a fault reaches its workers by
# ``of: source``.
CONNECT_SOURCE = Runtime(
    name="connect-source",
    listed=False,
    module="harness.pipeline.connect.worker",
    process_per_consumer=True,  # each worker is given its index
    group_member=False,
    commit_failure=CommitFailureVia.PROXY,  # it commits no consumer offsets
    spark=False,
    read_committed=False,
    ready=EventKind.RUNTIME_START,  # not waited for as a lane's: the source's own wait
    connect=True,
)

DEFAULT = LISTENER  # a scenario's, unless it names its runtimes
REGISTRY: dict[str, Runtime] = {
    r.name: r for r in (LISTENER, SPARK, RELAY, COMMAND, CONNECT, CONNECT_SOURCE)
}


def register(runtime: Runtime) -> Runtime:
    """Add a runtime (a plug-in); its name must be new."""
    if runtime.name in REGISTRY:
        raise ValueError(f"a runtime named {runtime.name!r} is registered already")
    REGISTRY[runtime.name] = runtime
    return runtime


def names() -> tuple[str, ...]:
    """The listed runtimes' names: what a scenario's ``runtimes:`` and ``--runtime`` choose from."""
    return tuple(r.name for r in REGISTRY.values() if r.listed)


def get_runtime(name: str) -> Runtime:
    """The registered runtime ``name``; ValueError naming the listed runtimes otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r} (known: {', '.join(names())})") from None
