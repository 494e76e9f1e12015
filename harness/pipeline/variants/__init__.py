"""The consumer variants (sink strategies), and how a scenario names one."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from harness.errors import BadInput
from harness.pipeline.variants.base import Key, Variant, WriteContext
from harness.pipeline.variants.check_then_insert import CheckThenInsert
from harness.pipeline.variants.dedup_log import DedupLog
from harness.pipeline.variants.idempotent import Idempotent
from harness.pipeline.variants.naive import Naive
from harness.pipeline.variants.transactional import Transactional
from harness.pipeline.variants.unique_index import UniqueIndex

BUILT_IN: dict[str, type[Variant]] = {
    cls.name: cls
    for cls in (Naive, Idempotent, Transactional, UniqueIndex, DedupLog, CheckThenInsert)
}

__all__ = ["BUILT_IN", "Key", "Variant", "WriteContext", "make_variant"]


def make_variant(name: str, options: Mapping[str, Any] | None = None) -> Variant:
    """A built-in variant by name, or a user's own as ``module:callable`` (called with the
    options as keyword arguments; it must return a ``Variant``)."""
    options = dict(options or {})
    if ":" in name:
        factory = _import(name)
        try:
            variant = factory(**options)
        except TypeError as exc:
            raise BadInput(f"variant {name}: {exc}") from None
        if not isinstance(variant, Variant):
            raise BadInput(f"variant {name} returned {type(variant).__name__}, not a Variant")
        return variant
    cls = BUILT_IN.get(name)
    if cls is None:
        known = ", ".join(sorted(BUILT_IN))
        raise BadInput(f"unknown variant {name!r} (built in: {known}; or module:callable)")
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"variant {name}: {exc}") from None


def _import(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadInput(f"variant {spec}: cannot import {module_name} ({exc})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise BadInput(f"variant {spec}: {module_name} has no {attr!r}") from None
