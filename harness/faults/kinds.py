"""The fault kinds a scenario can schedule: every family module in ``harness.faults.families``,
found by kind, and their entries parsed from YAML.

A family is found, not listed: adding one is adding its module (and its test). The modules
are imported here with ``importlib`` (``tests/test_imports.py`` counts these imports as edges of
the import graph, so that they hide no cycle).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import typing
from dataclasses import MISSING, fields
from enum import Enum
from typing import Any, Union

from harness.faults import families
from harness.faults.base import Fault, FieldError, FieldErrors, Problem


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


def parse_fault(raw: Any, name: str) -> Fault:
    """A fault from its YAML mapping; ``FieldErrors`` names every field that is wrong."""
    if not isinstance(raw, dict):
        raise FieldErrors([("", f"a fault must be a mapping, got {type(raw).__name__}")])
    spec = dict(raw)
    kind = spec.pop("kind", None)
    if kind not in KINDS:
        raise FieldErrors([("kind", f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")])
    fault: Fault = _build(KINDS[kind], {"name": spec.pop("name", name), **spec}, "")
    problems = fault.problems()
    if problems:
        raise FieldErrors(problems)
    return fault


def _build(cls: type, raw: dict[str, Any], prefix: str) -> Any:
    """An instance of ``cls`` from ``raw``, or FieldErrors naming every field that is wrong."""
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    problems: list[Problem] = [
        (f"{prefix}{key}", f"unknown field (known: {', '.join(sorted(known))})")
        for key in raw
        if key not in known
    ]
    values = {}
    for name, f in known.items():
        if name in raw:
            try:
                values[name] = _coerce(hints[name], raw[name], f"{prefix}{name}")
            except FieldError as exc:
                problems.append((exc.field, exc.problem))
            except FieldErrors as exc:
                problems += exc.problems
        elif f.default is MISSING and f.default_factory is MISSING:
            problems.append((f"{prefix}{name}", "is required"))
    if problems:
        raise FieldErrors(problems)
    return cls(**values)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if value is None else _coerce(options[0], value, where)
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise FieldError(where, f"must be a list, got {value!r}")
        item = typing.get_args(hint)[0]
        return tuple(_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(hint, type) and hasattr(hint, "parse"):  # a field with a syntax of its own
        try:
            return hint.parse(value)
        except FieldError as exc:
            raise FieldError(where, exc.problem) from None
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(m.value for m in hint)
            raise FieldError(where, f"unknown {value!r} (choose from {choices})") from None
    if hint is bool:
        if not isinstance(value, bool):
            raise FieldError(where, f"must be true or false, got {value!r}")
        return value
    if hint in (int, float):
        ok = isinstance(value, int) if hint is int else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            raise FieldError(where, f"must be {'an integer' if hint is int else 'a number'}, "
                                    f"got {value!r}")  # fmt: skip
        return hint(value)
    if hint is str:
        if not isinstance(value, str):
            raise FieldError(where, f"must be a string, got {value!r}")
        return value
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        if not isinstance(value, dict):
            raise FieldError(where, f"must be a mapping, got {value!r}")
        return _build(hint, value, f"{where}.")
    raise TypeError(f"no coercion for {hint!r}")  # a programming error, not bad input


def example(
    kind: str, *, at: float = 3.0, at_event: int | None = None, duration: float = 5.0
) -> dict[str, Any]:
    """A scenario entry for one fault of ``kind`` starting at ``at`` seconds (or once
    ``at_event`` records were acknowledged) - what a notebook or a reader exploring the lab
    starts from before tuning the fields."""
    if kind not in KINDS:
        raise FieldError("kind", f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    return {"kind": kind, **KINDS[kind].example(at, at_event, duration)}
