"""The seeded workload: the same spec and seed always give the same events, byte for byte."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from harness.workload.events import ChangeEvent, Kind, Op
from harness.workload.shapes import DEFAULT, PoisonKind, derived

STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
BASE_TS_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: timestamps are part of the seeded output
RESEND_WINDOW = 200  # upstream resends repeat a recent change, as a retrying producer does


@dataclass(frozen=True)
class Burst:
    """Extra resends or poison records for the events ``start <= seq < end`` (a producer-side
    fault: an upstream retry storm, a bad deploy writing garbage)."""

    kind: Kind  # RESEND or POISON
    start: int
    end: int
    fraction: float
    shapes: tuple[PoisonKind, ...] = DEFAULT  # a poison burst's bad records' shapes


@dataclass(frozen=True)
class WorkloadSpec:
    events: int = 2000
    keys: int = 200  # distinct order_ids
    key_skew: float = 0.0  # Zipf exponent: 0 uniform, 1.0 a few hot orders take most changes
    poison_fraction: float = 0.0  # bad records (harness.workload.shapes)
    poison_shapes: tuple[PoisonKind, ...] = DEFAULT  # the shapes they take, one drawn for each
    resend_fraction: float = 0.0  # business changes sent again with a new event_id
    delete_fraction: float = 0.05  # of the changes to an existing order
    seed: int = 1
    bursts: tuple[Burst, ...] = ()

    def fractions(self, seq: int) -> tuple[float, float]:
        """(poison, resend) probability for the event at ``seq``, bursts included."""
        poison, resend = self.poison_fraction, self.resend_fraction
        for b in self.bursts:
            if b.start <= seq < b.end:
                if b.kind is Kind.POISON:
                    poison += b.fraction
                else:
                    resend += b.fraction
        return poison, resend

    def shapes(self, seq: int, roll: float) -> tuple[PoisonKind, ...]:
        """The shapes a bad record at ``seq`` takes, the ``roll`` that made it bad deciding
        whose: the workload's own fraction first, then each poison burst's in turn."""
        upto = self.poison_fraction
        if roll < upto:
            return self.poison_shapes
        for b in self.bursts:
            if b.kind is Kind.POISON and b.start <= seq < b.end:
                upto += b.fraction
                if roll < upto:
                    return b.shapes
        return self.poison_shapes

    @property
    def bad(self) -> bool:
        """Whether it has bad records (its own fraction, or a poison fault's window)."""
        return self.poison_fraction > 0 or any(b.kind is Kind.POISON for b in self.bursts)

    @property
    def shaped(self) -> bool:
        """Whether some bad record may take a shape beyond the default mix's."""
        drawn = [*self.poison_shapes, *(s for b in self.bursts for s in b.shapes)]
        return self.bad and any(derived(s) for s in drawn)

    @property
    def oversize(self) -> bool:
        """Whether a bad record may be over MongoDB's document limit (sent compressed)."""
        drawn = [*self.poison_shapes, *(s for b in self.bursts for s in b.shapes)]
        return self.bad and PoisonKind.OVERSIZE in drawn

    @property
    def resends(self) -> bool:
        """Whether upstream sends some changes again, with new event ids."""
        return self.resend_fraction > 0 or any(b.kind is Kind.RESEND for b in self.bursts)

    def problems(self) -> list[tuple[str, str]]:
        """(field, what is wrong) for every invalid field."""
        found = []
        if self.events < 0:
            found.append(("events", f"must be >= 0, got {self.events}"))
        if self.keys < 1:
            found.append(("keys", f"must be >= 1, got {self.keys}"))
        if self.key_skew < 0:
            found.append(("key_skew", f"must be >= 0, got {self.key_skew}"))
        for name in ("poison_fraction", "resend_fraction", "delete_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                found.append((name, f"must be in [0, 1), got {value}"))
        if self.poison_fraction + self.resend_fraction >= 1:
            found.append(("resend_fraction", "poison_fraction + resend_fraction must be < 1"))
        for b in self.bursts:
            if b.kind not in (Kind.POISON, Kind.RESEND) or not 0 <= b.start <= b.end:
                found.append(("bursts", f"invalid burst {b}"))
        found += shape_problems("poison_shapes", self.poison_shapes)
        return found


def shape_problems(where: str, given: Sequence[Any]) -> list[tuple[str, str]]:
    """Each name that is not a bad record's shape, and an empty list."""
    if not given:
        return [(where, f"at least one shape ({', '.join(PoisonKind)})")]
    return [(f"{where}[{i}]", f"unknown shape {name!r} (one of {', '.join(PoisonKind)})")
            for i, name in enumerate(given) if name not in set(PoisonKind)]  # fmt: skip


def generate(spec: WorkloadSpec) -> Iterator[ChangeEvent]:
    """The workload's events in production order."""
    if problems := spec.problems():
        raise ValueError("; ".join(f"{field}: {why}" for field, why in problems))
    rng = random.Random(spec.seed)
    weights = [1.0 / (i**spec.key_skew) for i in range(1, spec.keys + 1)]
    cumulative = list(itertools.accumulate(weights))
    rows: dict[int, dict[str, Any] | None] = {}  # order_id -> current row (None once deleted)
    versions: dict[int, int] = {}
    recent: list[ChangeEvent] = []

    def event_id() -> str:
        return f"e-{rng.getrandbits(64):016x}"

    for seq in range(spec.events):
        ts_ms = BASE_TS_MS + seq * 10
        roll = rng.random()
        order_id = rng.choices(range(1, spec.keys + 1), cum_weights=cumulative)[0]
        poison_fraction, resend_fraction = spec.fractions(seq)
        if roll < poison_fraction:
            poison = PoisonKind(rng.choice(spec.shapes(seq, roll)))
            if derived(poison) and recent:
                # A real change gone wrong on its way: a recent one's order, version and rows.
                c = rng.choice(recent)
                # Another order, a duplicate-keys record's second order_id.
                others = [r.order_id for r in recent if r.order_id != c.order_id]
                twin = rng.choice(others) if others else c.order_id % spec.keys + 1
                yield ChangeEvent(
                    seq, event_id(), c.order_id, c.version, c.op, Kind.POISON, c.tx_id,
                    c.ts_ms, c.before, c.after, poison, twin,
                )  # fmt: skip
                continue
            yield ChangeEvent(
                seq, event_id(), order_id, 0, Op.UPDATE, Kind.POISON, f"tx-{seq}", ts_ms,
                None, None, poison,
            )  # fmt: skip
            continue
        if roll < poison_fraction + resend_fraction and recent:
            original = rng.choice(recent)
            yield ChangeEvent(
                seq, event_id(), original.order_id, original.version, original.op, Kind.RESEND,
                original.tx_id, original.ts_ms, original.before, original.after,
            )  # fmt: skip
            continue
        before = rows.get(order_id)
        version = versions.get(order_id, 0) + 1
        if before is None:
            op = Op.CREATE
        elif rng.random() < spec.delete_fraction:
            op = Op.DELETE
        else:
            op = Op.UPDATE
        after = None
        if op is not Op.DELETE:
            after = {
                "order_id": order_id,
                "version": version,
                "status": rng.choice(STATUSES),
                "amount_cents": rng.randint(100, 100_000),
                "customer_id": rng.randint(1, 5_000),
            }
        event = ChangeEvent(
            seq, event_id(), order_id, version, op, Kind.NORMAL, f"tx-{seq}", ts_ms, before, after
        )
        rows[order_id] = after
        versions[order_id] = version
        recent.append(event)
        if len(recent) > RESEND_WINDOW:
            recent.pop(0)
        yield event
