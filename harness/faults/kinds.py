"""The fault kinds a scenario can schedule: every family module in ``harness.faults.families``,
found by kind, and their entries parsed from YAML (``harness.records``, as the scenario's other
sections are).

A family is found, not listed: adding one is adding its module (and its test). The modules
are imported here with ``importlib`` (``tests/test_imports.py`` counts these imports as edges of
the import graph, so that they hide no cycle).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from harness.faults import families
from harness.faults.base import Fault
from harness.history.events import EventKind
from harness.history.origin import Injects
from harness.pipeline.runtimes import DEFAULT, REGISTRY
from harness.records import FieldError, FieldErrors, build


def _discover() -> dict[str, type[Fault]]:
    found: dict[str, type[Fault]] = {}
    for info in sorted(pkgutil.iter_modules(families.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{families.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, Fault)
                and cls.__module__ == module.__name__
                and not inspect.isabstract(cls)
                and "kind" in vars(cls)
            ):
                if cls.kind in found:
                    raise TypeError(
                        f"two fault families say kind {cls.kind!r}: {cls}, {found[cls.kind]}"
                    )
                found[cls.kind] = cls
    return dict(sorted(found.items()))


KINDS: dict[str, type[Fault]] = _discover()


def injects(runtime: str) -> Injects:
    """What a fault of each kind makes up on a lane of the runtime named ``runtime``
    (harness.history.origin); a runtime not registered here is taken as the default one."""
    lane = REGISTRY.get(runtime, DEFAULT)

    def made_up(kind: str) -> frozenset[EventKind]:
        family = KINDS.get(kind)
        return family.injects(lane) if family is not None else frozenset()

    return made_up


def parse_fault(raw: Any, name: str) -> Fault:
    """A fault from its YAML mapping; ``FieldErrors`` names every field that is wrong."""
    if not isinstance(raw, dict):
        raise FieldErrors([("", f"a fault must be a mapping, got {type(raw).__name__}")])
    spec = dict(raw)
    kind = spec.pop("kind", None)
    if kind not in KINDS:
        raise FieldErrors([("kind", f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")])
    fault: Fault = build(KINDS[kind], {"name": spec.pop("name", name), **spec})
    problems = fault.problems()
    if problems:
        raise FieldErrors(problems)
    return fault


def example(
    kind: str, *, at: float = 3.0, at_event: int | None = None, duration: float = 5.0
) -> dict[str, Any]:
    """A scenario entry for one fault of ``kind`` starting at ``at`` seconds (or once
    ``at_event`` records were acknowledged) - what a notebook or a reader exploring the lab
    starts from before tuning the fields."""
    if kind not in KINDS:
        raise FieldError("kind", f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    return {"kind": kind, **KINDS[kind].example(at, at_event, duration)}
