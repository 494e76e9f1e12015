"""What one variant's run came to, beyond its counts.

``pass`` - every expectation held; ``fail`` - one did not; ``unfired`` - a planned fault never
happened (a crash point never reached, a window that opened after the work was done), so the
counts say nothing about that fault: not a pass, and not an anomaly verdict either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNFIRED = "unfired"

    @property
    def word(self) -> str:
        """How tables show it: ``pass``, ``FAIL``, ``UNFIRED``."""
        return "pass" if self is Outcome.PASS else self.value.upper()

    @classmethod
    def parse(cls, text: str) -> Outcome:
        """results.json's ``expectation``; anything unknown reads as a failure."""
        try:
            return cls(text)
        except ValueError:
            return cls.FAIL

    @classmethod
    def of(cls, failures: Sequence[str], unfired: Sequence[UnfiredFault]) -> Outcome:
        if unfired:
            return cls.UNFIRED
        return cls.FAIL if failures else cls.PASS


@dataclass(frozen=True)
class UnfiredFault:
    """A fault of the scenario that did not fire in one variant's run, and why."""

    name: str
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name} never fired: {self.reason}"

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "reason": self.reason}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> UnfiredFault:
        return cls(str(raw["name"]), str(raw.get("kind", "")), str(raw.get("reason", "")))


def reason_text(failures: Sequence[str], unfired: Sequence[UnfiredFault]) -> str:
    """The ``reason`` of results.json: what did not fire, then what did not hold."""
    parts = [str(u) for u in unfired] + list(failures)
    return "; ".join(parts) if parts else "every expectation holds"
