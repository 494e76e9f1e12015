"""A user's own consumer, in any language, as a variant: a program the lab starts, kills,
pauses and counts from outside - the service a team runs in production, unchanged.

    variants:
      - name: command
        label: java-seed-002                  # the lane's name in reports (default: command)
        command: "java -jar listener.jar"     # run from the scenario's folder
        instances: 2                          # processes in one consumer group
        sink: {collection: landed, event_id: event_id}   # or business_key: [order_id, version]
        image: registry.local/listener:1.4    # optional, containers backend: run it in this image

Each instance gets only environment variables (``harness.pipeline.command``); what it stored
is read from ``sink.collection``: a document per change it stored, naming the change by the
producer-minted event id or by the business key. ``sink.current`` optionally names a
current-state collection (``_id`` = order id, with its ``version``); without it, staleness is
not judged. ``promise`` says what the program guarantees (default exactly-once).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.checker.promise import PROMISES, Promise
from harness.pipeline.batch import Batch
from harness.pipeline.runtimes import COMMAND, Runtime
from harness.pipeline.variants.base import Landing, Variant, WriteContext

SINK_FIELDS = ("collection", "event_id", "business_key", "current")


def landing_of(sink: Mapping[str, Any]) -> Landing:
    """The ``sink:`` mapping as the checker reads it; ValueError naming every problem."""
    problems = [f"sink: unknown field {k!r} (known: {', '.join(SINK_FIELDS)})" for k in sink]
    problems = [p for p, k in zip(problems, sink, strict=True) if k not in SINK_FIELDS]
    collection = sink.get("collection")
    if not isinstance(collection, str) or not collection:
        problems.append("sink.collection: the collection it stores a document per change in")
    event_id, key = sink.get("event_id"), sink.get("business_key")
    if (event_id is None) == (key is None):
        problems.append("sink: give one of event_id (a field) or business_key ([order, version])")
    elif event_id is not None and (not isinstance(event_id, str) or not event_id):
        problems.append(f"sink.event_id: a field name, got {event_id!r}")
    elif key is not None and not (
        isinstance(key, list | tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)
    ):
        problems.append(f"sink.business_key: [order id field, version field], got {key!r}")
    current = sink.get("current", "")
    if not isinstance(current, str):
        problems.append(f"sink.current: a collection name, got {current!r}")
    if problems:
        raise ValueError("; ".join(problems))
    order_id, version = key if key is not None else ("order_id", "version")
    return Landing(str(collection), order_id, version, event_id or "", current)


@dataclass
class Command(Variant):
    """A program in any language, run with the lab's environment variables."""

    name = "command"
    parses_records: ClassVar[bool] = False
    command: str = ""
    instances: int = 1
    sink: Mapping[str, Any] = field(default_factory=dict)
    label: str = "command"  # a lane's own name, not derived from the options
    promised: str = "exactly-once"
    # A container image the engine has (the containers backend): the command runs in it instead
    # of the lab's image, with the same variables and mounts.
    image: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.command, str) or not self.command.strip():
            problems.append("command: the program to run, e.g. 'java -jar listener.jar'")
        if not isinstance(self.instances, int) or isinstance(self.instances, bool):
            problems.append(f"instances: a whole number, got {self.instances!r}")
        elif self.instances < 1:
            problems.append(f"instances: at least 1, got {self.instances}")
        if not isinstance(self.image, str):
            problems.append(f"image: an image name, got {self.image!r}")
        if self.promised not in PROMISES:
            problems.append(f"promised: one of {', '.join(PROMISES)}, got {self.promised!r}")
        try:
            landing_of(self.sink if isinstance(self.sink, Mapping) else {})
        except ValueError as exc:
            problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))

    def program(self) -> tuple[str, ...]:
        return tuple(shlex.split(self.command))

    def own_runtime(self) -> Runtime:
        return COMMAND

    def container_image(self) -> str:
        return self.image

    def runs_on(self, runtime: Runtime) -> bool:
        return runtime is COMMAND

    def consumer_count(self, default: int) -> int:
        return self.instances

    @property
    def promise(self) -> Promise:
        return PROMISES[self.promised]

    def landing(self) -> Landing:
        return landing_of(self.sink)

    def prepare(self, db: Any) -> None:
        """Nothing: the program makes what it needs (its database is new and empty)."""

    def write(self, batch: Batch, ctx: WriteContext) -> None:
        raise TypeError("a command consumer writes its records itself")
