"""The workload: seeded change events, the producer, and the ledger of what the broker acked."""

from harness.workload.events import ChangeEvent, Kind, Op, ParsedEvent, ParseError, parse
from harness.workload.generator import WorkloadSpec, generate

__all__ = [
    "ChangeEvent",
    "Kind",
    "Op",
    "ParseError",
    "ParsedEvent",
    "WorkloadSpec",
    "generate",
    "parse",
]
