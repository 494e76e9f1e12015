"""An exploration's page (``explore.md``): its findings with their reproducers, every run in a
line, and what the runs exercised - fault kind x target x variant, the conditions the
histories show, and the conditions no run reached."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from harness.explore.coverage import Condition, Exercised, unreached
from harness.explore.guide import aimed_text
from harness.explore.model import Exploration, Finding, RunRecord, aims
from harness.explore.shrink import Tried, Verdict
from harness.sources.spec import SourceKind

PAGE = "explore.md"


def write(state: Exploration) -> Path:
    plan = state.plan
    plan.out.mkdir(parents=True, exist_ok=True)
    elapsed = sum(r.seconds for r in state.runs)
    explored = plan.explored
    lines = [
        f"# Exploration: seed {plan.seed}, {explored.runtime}"
        + (" from PostgreSQL through Debezium" if explored.source == SourceKind.DEBEZIUM else ""),
        "",
        f"Variants: {', '.join(map(str, explored.variants))}. Fault kinds: "
        f"{', '.join(explored.kinds)}. Budget {plan.budget_s:.0f} s, {plan.strategy} draws; "
        f"{len(state.runs)} runs "
        f"({elapsed:.0f} s running them)"
        + (f"; ended early: {state.interrupted}" if state.interrupted else "")
        + ".",
        "",
        "## Findings",
        "",
        *(_finding(f, plan.out) for f in state.findings),
        *([] if state.findings else ["No variant broke its promise."]),
        "",
        "## Runs",
        "",
        "| run | workload | schedule | aimed at | verdict | s |",
        "| ---: | --- | --- | --- | --- | ---: |",
        *(_run(r) for r in state.runs),
        "",
        *coverage(state.runs),
    ]
    page = plan.out / PAGE
    page.write_text("\n".join(lines) + "\n")
    return page


def coverage(runs: Sequence[RunRecord]) -> list[str]:
    """The coverage section: what was aimed at and fired, and what the histories show."""
    rows = aims(runs)
    cell = {(a.kind, a.target, a.variant): f"{a.fired}/{a.drawn}" for a in rows}
    variants = sorted({a.variant for a in rows})
    targets = sorted({(a.kind, a.target) for a in rows})
    seen: list[Exercised] = [e for r in runs for _v, e in r.exercised]
    by_variant: dict[str, Counter[Condition]] = {}
    for r in runs:
        for variant, e in r.exercised:
            by_variant.setdefault(variant, Counter()).update(e.conditions)
    points = Counter(p for e in seen for p in e.crash_points)
    lines = [
        "## Coverage",
        "",
        "Each fault kind and target, per variant: the runs it fired in / was drawn for.",
        "",
        "| fault kind | target | " + " | ".join(variants) + " |",
        "| --- | --- |" + " ---: |" * len(variants),
        *(
            f"| {k} | {t} | " + " | ".join(cell.get((k, t, v), "0/0") for v in variants) + " |"
            for k, t in targets
        ),
        "",
        "Conditions the histories show (runs in which each happened):",
        "",
        "| variant | " + " | ".join(c.value for c in Condition) + " |",
        "| --- |" + " ---: |" * len(Condition),
        *(
            f"| {variant} | " + " | ".join(str(counts[c]) for c in Condition) + " |"
            for variant, counts in sorted(by_variant.items())
        ),
        "",
        "Crash points reached: "
        + (", ".join(f"{p} ({n})" for p, n in sorted(points.items())) or "none"),
        "",
        "Never happened (where the next exploration should push): "
        + (", ".join(c.value for c in unreached(seen)) or "nothing - every condition was reached"),
    ]
    return lines


def _finding(f: Finding, out: Path) -> str:
    where = os.path.relpath(f.scenario_file, out)
    shown = f" Its timeline: [report]({os.path.relpath(f.report, out)})." if f.report else ""
    runs = f"run {f.run}" if not f.also else f"runs {', '.join(map(str, f.runs))}: one cause"
    return (
        f"* **found-{f.number}** ({runs}): {'; '.join(map(str, f.violations))}. Shrunk in "
        f"{len(f.trail)} tries ({_kept(f.trail)}) to "
        f"`{f.minimal.schedule()}` over {f.minimal.shape.events} events; reproduced in "
        f"{f.reproduced} of {f.replays} replays. Re-run: `chaoslab run {where}`.{shown}"
    )


def _run(r: RunRecord) -> str:
    s = r.trial.shape
    workload = f"{s.events} ev, {s.partitions} p, {s.consumers} c, batch {s.batch_size}" + (
        f", {s.settings}" if s.mongo else ""
    )
    aimed = aimed_text(r.aimed_at) or "-"
    return (
        f"| {r.number} | {workload} | {r.trial.schedule()} | {aimed} | {r.verdict} "
        f"| {r.seconds:.0f} |"
    )


def _kept(trail: tuple[Tried, ...]) -> str:
    """``3 kept``, and how many said nothing and why where some did (``2 not judged: 1x
    consumer-crash#1 never fired, 1x the finding's replays need the rest of the budget``)."""
    why = Counter(t.replay.why for t in trail if t.replay.verdict is Verdict.UNJUDGED)
    unjudged = sum(why.values())
    reasons = ", ".join(f"{n}x {reason or 'no reason given'}" for reason, n in why.most_common())
    return f"{sum(t.kept for t in trail)} kept" + (
        f", {unjudged} not judged: {reasons}" if unjudged else ""
    )
