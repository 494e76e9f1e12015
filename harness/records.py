"""Records from YAML: a dataclass built from a mapping, naming every field that is wrong (one
unknown, one missing, a value of the wrong type) at once, so that a user fixes them in one go.
The scenario's sections and its faults are built alike.

A field's type hint says what it takes: ``int``, ``float`` (an int too), ``bool``, ``str``, an
``Enum`` (by value), ``X | None``, ``tuple[X, ...]`` and ``list[X]`` (a lone value is a list of
one), ``dict[str, X]``, ``Any``, another dataclass (a nested mapping), or a type with a
``parse`` classmethod - a field with a syntax of its own (a fault's broker target). Checks that
need more than the types are the record's own (``problems()``).
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields
from enum import Enum
from typing import Any, TypeVar, Union

T = TypeVar("T")
# (field, what is wrong with it); the field is dotted from the record built (``mix.push``).
Problem = tuple[str, str]


class FieldError(ValueError):
    """A field is wrong: ``field`` names it relative to the record."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class FieldErrors(ValueError):
    """Every problem of one record, so that a user fixes them in one go."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{f}: {p}" if f else p for f, p in problems))
        self.problems = problems


def build(cls: type[T], raw: Any, prefix: str = "", *, internal: frozenset[str] = frozenset()) -> T:
    """An instance of the dataclass ``cls`` from the mapping ``raw``, or FieldErrors naming
    every field that is wrong. ``internal`` fields are the lab's to set, never the file's."""
    if not isinstance(raw, dict):
        where = prefix.removesuffix(".")
        raise FieldErrors([(where, f"must be a mapping, got {type(raw).__name__}")])
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.name not in internal}  # type: ignore[arg-type]
    problems: list[Problem] = [
        (f"{prefix}{key}", f"unknown field (known: {', '.join(sorted(known))})")
        for key in raw
        if key not in known
    ]
    values = {}
    for name, f in known.items():
        if name in raw:
            try:
                values[name] = coerce(hints[name], raw[name], f"{prefix}{name}")
            except FieldError as exc:
                problems.append((exc.field, exc.problem))
            except FieldErrors as exc:
                problems += exc.problems
        elif f.default is MISSING and f.default_factory is MISSING:
            problems.append((f"{prefix}{name}", "is required"))
    if problems:
        raise FieldErrors(problems)
    return cls(**values)


def coerce(hint: Any, value: Any, where: str) -> Any:
    """``value`` as the type ``hint`` says, or FieldError naming ``where``."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if value is None else coerce(options[0], value, where)
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise FieldError(where, f"must be a list, got {value!r}")
        item = typing.get_args(hint)[0]
        return origin(coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise FieldError(where, f"must be a mapping, got {value!r}")
        _, item = typing.get_args(hint)
        return {str(k): coerce(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and hasattr(hint, "parse"):  # a field with a syntax of its own
        try:
            return hint.parse(value)
        except FieldError as exc:
            raise FieldError(where, exc.problem) from None
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(str(m.value) for m in hint)
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
        return build(hint, value, f"{where}.")
    raise TypeError(f"no coercion for {hint!r}")  # a programming error, not bad input
