"""What a variant promises: the verdict's counts that must be zero for it to keep its word.

Explore judges a run by the variant's own promise, not by a scenario's expectations: a run is
a violation when a variant broke what it said it guarantees (Jepsen's checkers judge a history
against the model the system claims, the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.checker.model import Verdict

# Copies of one business change beyond the first; what a resend from upstream (the same change
# again, with a new event id) adds to a variant that de-duplicates by event id.
DUPLICATE_FIELDS = ("duplicates", "duplicated_keys")


@dataclass(frozen=True)
class Promise:
    """A guarantee, as the verdict's counts that must be zero."""

    name: str
    zero: tuple[str, ...]  # Verdict fields
    # Whether it also holds when upstream sends a change again with a new event id: a variant
    # keyed by the event id cannot see that the change is the same, and does not promise to.
    covers_resends: bool = True

    def under(self, *, resends: bool) -> Promise:
        """The promise as it applies to a run (with upstream resends or without)."""
        if not resends or self.covers_resends:
            return self
        zero = tuple(f for f in self.zero if f not in DUPLICATE_FIELDS)
        return Promise(f"{self.name} (no upstream resends)", zero, covers_resends=True)

    def broken(self, verdict: Verdict) -> tuple[str, ...]:
        """What of it the verdict breaks, e.g. ``("duplicates 3",)``; () if it kept it."""
        return tuple(f"{name} {value}" for name in self.zero if (value := getattr(verdict, name)))

    def without_resends(self) -> Promise:
        """The same guarantee, for a variant that de-duplicates by the event id."""
        return Promise(self.name, self.zero, covers_resends=False)

    def __str__(self) -> str:
        return self.name


# Phantoms (a change in the sink that nobody produced) break every promise: they are the lab's
# own defect or the sink's, never a delivery semantics.
EXACTLY_ONCE = Promise(
    "exactly-once", ("duplicates", "duplicated_keys", "lost", "stale", "phantoms")
)
# A stale projection lost the latest change of its order: at-least-once keeps it too.
AT_LEAST_ONCE = Promise("at-least-once", ("lost", "stale", "phantoms"))
# No copy, whatever else: a write under a unique key that refuses a replay (and may stop there).
AT_MOST_ONCE = Promise("at-most-once", ("duplicates", "duplicated_keys", "phantoms"))
NOTHING = Promise("nothing", ("phantoms",))
PROMISES = {p.name: p for p in (EXACTLY_ONCE, AT_LEAST_ONCE, AT_MOST_ONCE, NOTHING)}
