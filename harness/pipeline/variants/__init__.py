"""The consumer variants (sink strategies), and how a scenario names one."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.errors import BadInput
from harness.pipeline import mongo_options
from harness.pipeline.variants.base import MONGO_OPTION, Key, Variant, WriteContext, make_plugin
from harness.pipeline.variants.check_then_insert import CheckThenInsert
from harness.pipeline.variants.command import Command
from harness.pipeline.variants.connect import (
    Connect,
    ConnectBusinessKey,
    ConnectCdc,
    ConnectDefault,
    ConnectIdempotent,
)
from harness.pipeline.variants.connector import ConnectorBatch, ConnectorSink
from harness.pipeline.variants.dedup_log import DedupLog
from harness.pipeline.variants.idempotent import Idempotent
from harness.pipeline.variants.naive import Naive
from harness.pipeline.variants.processed_log_txn import ProcessedLogTxn
from harness.pipeline.variants.spark_job import SparkJob
from harness.pipeline.variants.transactional import Transactional
from harness.pipeline.variants.unique_index import UniqueIndex

BUILT_IN: dict[str, type[Variant]] = {
    cls.name: cls
    for cls in (
        Naive,
        Idempotent,
        Transactional,
        UniqueIndex,
        DedupLog,
        ProcessedLogTxn,
        CheckThenInsert,
        SparkJob,
        ConnectorBatch,
        ConnectorSink,
        Command,
        Connect,
        ConnectDefault,
        ConnectIdempotent,
        ConnectBusinessKey,
        ConnectCdc,
    )
}

__all__ = ["BUILT_IN", "Key", "Variant", "WriteContext", "import_path", "make_variant"]


def make_variant(name: str, options: Mapping[str, Any] | None = None) -> Variant:
    """A built-in variant by name, or a user's own as ``module:callable`` (called with the
    options as keyword arguments; it must return a ``Variant``). The option ``mongo`` is every
    variant's, not its class's: its consumers' MongoDB client settings over the pipeline's
    (``harness.pipeline.mongo_options``)."""
    rest = dict(options or {})
    mongo = rest.pop(MONGO_OPTION, {})
    if not isinstance(mongo, Mapping):
        raise BadInput(f"variant {name}: mongo must be a mapping of client settings, got {mongo!r}")
    wrong = mongo_options.problems(mongo)
    if wrong:
        raise BadInput(f"variant {name}: " + "; ".join(f"{at}: {why}" for at, why in wrong))
    # Variant is abstract: it is only the isinstance check of a user's factory's product.
    made = make_plugin(name, rest, BUILT_IN, Variant, "variant")  # type: ignore[type-abstract]
    if mongo:
        # Set on the instance whatever its class (a user's may be a frozen dataclass).
        object.__setattr__(made, "mongo", MappingProxyType(dict(mongo)))
    return made


def import_path(name: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """The sys.path entries a runtime process needs to import what the variant names (a
    user's variant, or a Spark job's module): each module's root, as this process found it."""
    specs = [s for s in (name, options.get("job")) if isinstance(s, str) and ":" in s]
    roots = []
    for spec in specs:
        module_name = spec.partition(":")[0]
        module = sys.modules.get(module_name)
        origin = getattr(module, "__file__", None)
        if origin is None:
            continue
        root = Path(origin).resolve().parent
        for _ in range(module_name.count(".") + (Path(origin).name == "__init__.py")):
            root = root.parent
        roots.append(str(root))
    return tuple(dict.fromkeys(roots))
