"""One exploration run's plan: a small randomized workload and 1-4 faults drawn from the fault
families, all from one seed - written as a scenario file, so a run of it is an ordinary
scenario run and a finding is a scenario ``chaoslab run`` accepts as is.

Drawing is pure: the same exploration seed and run number always give the same trial.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.environment.base import BackendAbilities
from harness.faults.base import Fault, Space
from harness.faults.kinds import KINDS
from harness.pipeline import mongo_options
from harness.pipeline.runtimes import get_runtime
from harness.pipeline.variants import make_variant
from harness.scenario import Scenario, ScenarioError, parse_scenario, runnable
from harness.sources.spec import SourceKind

MAX_FAULTS = 4
# A trial's Debezium source: one worker whose offsets are flushed often enough that a kill within
# a trial's seconds of writing comes after one (Connect's default is a minute).
DEBEZIUM = {
    "kind": SourceKind.DEBEZIUM.value,
    "connect": {"workers": 1, "offset.flush.interval.ms": 2000},
}
# A trial's Connect cluster hands a lost worker's tasks out after this, not Connect's five
# minutes: a worker kill is under way until Connect has placed them again (the fault family
# waits for it), and a trial has 180 s in all.
TRIAL_REBALANCE_DELAY_MS = 20_000
# Tries to draw one fault before its slot stays empty: a family refused for the setting (a
# consumer index beyond the consumers) is drawn again.
TRIES = 20


@dataclass(frozen=True)
class Shape:
    """The workload and pipeline of a trial (small: a run takes tens of seconds)."""

    events: int
    keys: int
    partitions: int
    rate: float  # events per second: the work lasts events / rate seconds, and faults fall in it
    batch_size: int
    consumers: int
    # The consumers' MongoDB client settings (pipeline.mongo), as (name, value) pairs: the
    # drivers' defaults where it names none.
    mongo: tuple[tuple[str, Any], ...] = ()

    @property
    def settings(self) -> str:
        """The client settings in a few words ('' for the drivers' defaults)."""
        return " ".join(f"{k}={mongo_options.text(v)}" for k, v in self.mongo)

    @property
    def horizon_s(self) -> float:
        """About how long the producer sends: timed faults start within it."""
        return self.events / self.rate

    @classmethod
    def draw(cls, rng: random.Random, runtime: str) -> Shape:
        # One Spark query per lane whatever the consumers: more listener processes only.
        consumers = rng.randint(1, 3) if get_runtime(runtime).process_per_consumer else 1
        return cls(
            events=rng.randrange(200, 1501, 50),
            keys=rng.randrange(20, 201, 10),
            partitions=rng.randint(1, 3),
            rate=float(rng.randrange(100, 501, 50)),
            batch_size=rng.randrange(20, 201, 10),
            consumers=consumers,
        )

    def with_mongo(self, rng: random.Random) -> Shape:
        """This shape with client settings drawn from ``rng``: a production consumer's
        timeouts and retry policy, often none of them (the drivers' defaults)."""
        drawn: dict[str, Any] = {}
        if rng.random() < 0.3:
            drawn["retryWrites"] = False
        if rng.random() < 0.4:
            drawn["socketTimeoutMS"] = rng.choice((1000, 2000, 5000, 10000))
            drawn["connectTimeoutMS"] = rng.choice((1000, 2000, 5000))
        if rng.random() < 0.3:
            drawn["serverSelectionTimeoutMS"] = rng.choice((2000, 5000, 10000))
        if rng.random() < 0.2:
            drawn["maxCommitTimeMS"] = rng.choice((1000, 5000))
        return replace(self, mongo=tuple(drawn.items()))


@dataclass(frozen=True)
class Trial:
    """A scenario to run: its seed, runtime, variants (scenario entries), shape and faults
    (scenario entries, ``kind`` and ``name`` included)."""

    name: str
    seed: int
    runtime: str
    variants: tuple[str | Mapping[str, Any], ...]
    shape: Shape
    faults: tuple[Mapping[str, Any], ...]
    description: str = ""
    source: str = SourceKind.PRODUCER

    def document(
        self, expect: Mapping[str, Mapping[str, int | str]] | None = None
    ) -> dict[str, Any]:
        """The scenario file's mapping."""
        s = self.shape
        doc: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "workload": {
                "events": s.events,
                "keys": s.keys,
                "partitions": s.partitions,
                "rate": s.rate,
            },
            "runtimes": [self.runtime],
            "pipeline": {
                "batch_size": s.batch_size,
                "consumers": s.consumers,
                "timeout_s": 180,
                **({"mongo": dict(s.mongo)} if s.mongo else {}),
                **(
                    {"connect": {"scheduled.rebalance.max.delay.ms": TRIAL_REBALANCE_DELAY_MS}}
                    if self.beside_connect
                    else {}
                ),
            },
            "variants": [v if isinstance(v, str) else dict(v) for v in self.variants],
            "faults": [dict(f) for f in self.faults],
        }
        if self.source == SourceKind.DEBEZIUM:
            doc["source"] = dict(DEBEZIUM)
        if expect:
            doc["expect"] = {k: dict(v) for k, v in expect.items()}
        return doc

    def scenario(self) -> Scenario:
        return parse_scenario(self.document(), f"<{self.name}>")

    @property
    def beside_connect(self) -> bool:
        """Whether a variant of it brings a Kafka Connect lane."""
        brought = [make_variant(*variant_entry(v)).own_runtime() for v in self.variants]
        return any(runtime is not None and runtime.connect for runtime in brought)

    def schedule(self) -> str:
        """One line: each fault's kind and fields."""
        return "; ".join(describe(f) for f in self.faults) or "no faults"

    def with_faults(self, faults: Sequence[Mapping[str, Any]]) -> Trial:
        return replace(self, faults=tuple(faults))


def describe(entry: Mapping[str, Any]) -> str:
    """``commit-failure(at=4.2, duration=12.0)``: a fault entry in a line."""
    fields = ", ".join(f"{k}={v}" for k, v in entry.items() if k not in ("kind", "name"))
    return f"{entry['kind']}({fields})"


@dataclass(frozen=True)
class Explored:
    """What an exploration draws from: its runtime, variants and fault kinds, on a backend."""

    runtime: str
    variants: tuple[str | Mapping[str, Any], ...]
    kinds: tuple[str, ...]
    backend: BackendAbilities
    source: str = SourceKind.PRODUCER  # where the records come from (a scenario's source:)


def drawable(kinds: Sequence[str] | None = None) -> tuple[str, ...]:
    """The fault kinds that say how to draw one of themselves (of ``kinds``, if given)."""
    return tuple(
        kind
        for kind, cls in KINDS.items()
        if cls.draw.__func__ is not Fault.draw.__func__  # type: ignore[attr-defined]
        and (kinds is None or kind in kinds)
    )


def draw_trial(explored: Explored, seed: int, number: int, candidate: int = 0) -> Trial:
    """Run ``number`` of the exploration with ``seed``: a pure function of the two. A guided
    draw's other ``candidate`` trials for the run come from streams of their own (the first is
    the random draw, so a random exploration's seeds still mean the same runs)."""
    stream = f"explore:{seed}:{number}" + (f":candidate-{candidate}" if candidate else "")
    rng = random.Random(stream)
    # The client settings from a stream of their own: the rest of a run's draw stays what it
    # was before they were drawn (the seeds a test or a finding names still mean that run).
    shape = Shape.draw(rng, explored.runtime).with_mongo(random.Random(f"{stream}:mongo"))
    trial = Trial(
        name=f"explore-{seed}-{number}",
        seed=rng.randrange(1, 1_000_000),
        runtime=explored.runtime,
        variants=explored.variants,
        shape=shape,
        faults=(),
        source=explored.source,
    )
    space = Space(trial.scenario().setting, explored.backend, shape.horizon_s + 2.0)
    faults: list[Mapping[str, Any]] = []
    for slot in range(rng.randint(1, MAX_FAULTS)):
        entry = _draw_fault(rng, space, explored, trial.with_faults(faults), slot + 1)
        if entry is not None:
            faults.append(entry)
    return trial.with_faults(faults)


def _draw_fault(
    rng: random.Random, space: Space, explored: Explored, so_far: Trial, number: int
) -> Mapping[str, Any] | None:
    for _ in range(TRIES):
        kind = rng.choice(explored.kinds)
        drawn = KINDS[kind].draw(rng, space)
        if drawn is None:
            continue
        entry = {"kind": kind, "name": f"{kind}#{number}", **drawn}
        if not refused(so_far.with_faults([*so_far.faults, entry]), explored.backend):
            return entry
    return None


def refused(trial: Trial, backend: BackendAbilities) -> str:
    """Why the trial cannot run as drawn on ``backend`` ('' if it can): every problem of its
    scenario, as a scenario file's."""
    try:
        runnable(trial.scenario(), backend)
    except ScenarioError as exc:
        return str(exc)
    return ""


def variant_entry(variant: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A variant's entry (a name, or a scenario file's mapping) as (name, options)."""
    if isinstance(variant, str):
        return variant, {}
    return str(variant["name"]), {k: v for k, v in variant.items() if k != "name"}
