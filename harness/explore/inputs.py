"""What ``chaoslab explore`` is asked for, checked before anything starts: every problem named
at once (exit code 2)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.checker.promise import NOTHING
from harness.environment.base import BackendAbilities
from harness.errors import BadInput
from harness.explore.guide import STRATEGIES
from harness.explore.model import DEFAULT_STRATEGY, REPLAYS, Plan
from harness.explore.trial import Explored, drawable, variant_entry
from harness.pipeline.runtimes import get_runtime, names
from harness.pipeline.variants import BUILT_IN, make_variant
from harness.sources.spec import SourceKind

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, None: 1}
SHORTEST_BUDGET_S = 60.0


def parse_budget(text: str, problems: list[str]) -> float:
    """``600``, ``90s``, ``10m`` or ``1h`` in seconds (a problem noted if it is not)."""
    match = _BUDGET.match(text)
    if not match:
        problems.append(f"--budget: expected seconds or e.g. 10m, 1h; got {text!r}")
        return 0.0
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds < SHORTEST_BUDGET_S:
        problems.append(f"--budget: at least {SHORTEST_BUDGET_S:.0f} s (one run and its report)")
    return seconds


def default_variants(runtime: str) -> tuple[str, ...]:
    """The built-in variants that promise something and run on ``runtime`` by name alone."""
    found = []
    for name in BUILT_IN:
        try:
            variant = make_variant(name)
        except BadInput:
            continue  # needs options (spark-job's job)
        if variant.promise != NOTHING and variant.runs_on(get_runtime(runtime)):
            found.append(name)
    return tuple(found)


def plan(
    *,
    runtime: str,
    variants: Sequence[str],
    kinds: Sequence[str] | None,
    backend: BackendAbilities,
    budget: str,
    seed: int,
    out: Path,
    findings: int | None = None,
    replays: int = REPLAYS,
    source: str = SourceKind.PRODUCER,
    strategy: str = DEFAULT_STRATEGY,
) -> Plan:
    """The exploration the command line asks for; BadInput naming every problem."""
    problems: list[str] = []
    budget_s = parse_budget(budget, problems)
    if findings is not None and findings < 1:
        problems.append(f"--findings: must be >= 1, got {findings}")
    if replays < 1:
        problems.append(f"--replays: must be >= 1, got {replays}")
    if strategy not in STRATEGIES:
        problems.append(f"--strategy: one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if runtime not in names():
        problems.append(f"--runtime: unknown {runtime!r} (choose from {', '.join(names())})")
    entries: list[str | Mapping[str, Any]] = []
    for text in variants:
        entry = _variant_entry(text, problems)
        if entry is not None:
            entries.append(entry)
    if runtime in names():
        for entry in entries:
            name, options = variant_entry(entry)
            # A connector brings its runtime (Kafka Connect's) and runs beside ``runtime``'s.
            if not make_variant(name, options).runs_with(get_runtime(runtime)):
                problems.append(f"--variant {name}: does not run on {runtime}")
    # An outbox's relay as the source needs a scenario's outbox: section, which explore's
    # drawn scenarios have not (yet).
    sources = [SourceKind.PRODUCER.value, SourceKind.DEBEZIUM.value]
    if source == SourceKind.OUTBOX:
        problems.append("--source outbox: explore draws no outbox workload yet; run a scenario "
                        "file with source: {kind: outbox, relay: ...}")  # fmt: skip
    elif source not in sources:
        problems.append(f"--source: one of {', '.join(sources)}, got {source!r}")
    elif source == SourceKind.DEBEZIUM:
        for entry in entries:
            if not make_variant(*variant_entry(entry)).parses_records:
                problems.append(
                    f"--variant {variant_entry(entry)[0]}: reads its records its own way, and "
                    "reading a Debezium source's is not built for it yet"
                )
    known = drawable()
    if kinds is not None:
        unknown = [k for k in kinds if k not in known]
        if unknown:
            problems.append(f"--faults: cannot draw {', '.join(unknown)} (can: {', '.join(known)})")
    if problems:
        raise BadInput("\n".join(problems))
    explored = Explored(
        runtime=runtime,
        variants=tuple(entries) or default_variants(runtime),
        kinds=drawable(kinds),
        backend=backend,
        source=source,
    )
    return Plan(
        explored, seed, budget_s, out, replays=replays, findings=findings, strategy=strategy
    )


def _variant_entry(text: str, problems: list[str]) -> str | Mapping[str, Any] | None:
    """``naive``, ``mypkg.sinks:Mine``, or a scenario's entry ``{name: dedup-log, key: ...}``."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        raw = text
    name, options = (raw, {}) if isinstance(raw, str) else (None, {})
    if isinstance(raw, dict):
        options = {k: v for k, v in raw.items() if k != "name"}
        name = raw.get("name")
    if not isinstance(name, str) or not name:
        problems.append(f"--variant: expected a name or {{name: ..., option: ...}}, got {text!r}")
        return None
    try:
        make_variant(name, options)
    except BadInput as exc:
        problems.append(f"--variant {text}: {exc}")
        return None
    return name if not options else {"name": name, **options}
