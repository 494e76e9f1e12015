"""Plain-text tables for the terminal: one scenario's variants, and scenario x variant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.results.model import ScenarioResult, VariantResult
from harness.results.soak import Role, SoakCell

# The columns of a variant's row: (header, right-aligned).
COLUMNS = (
    ("runtime", False),
    ("variant", False),
    ("acked", True),
    ("in_sink", True),
    ("dup", True),
    ("dup_keys", True),
    ("copies", False),
    ("lost", True),
    ("stale", True),
    ("dlq", True),
    ("ev/s", True),
    ("crash/restart", True),
    ("expectation", False),
)


def copies_text(copies: Mapping[int, int]) -> str:
    """``{2: 248, 3: 4}`` -> ``2x: 248, 3x: 4`` (business changes with that many copies)."""
    return ", ".join(f"{n}x: {count}" for n, count in sorted(copies.items())) or "-"


def dead_lettered_text(v: VariantResult) -> str:
    """``16 (1 stored, 18 merged, 108 good dead-lettered)``: the bad records dead-lettered,
    where the others went, and the good records dead-lettered beside them, where the lane's
    writes were followed (``harness.checker.bad_records``); else ``35 (38 missing, 38
    stored)``: not in the dead-letter topic, and stored as documents."""
    d = v.verdict
    counts: tuple[tuple[int, str], ...] = ((d.poison_missing, "missing"),
                                           (d.poison_stored, "stored"))  # fmt: skip
    if d.followed:
        counts = ((d.bad_stored, "stored"), (d.bad_merged, "merged"), (d.bad_dropped, "dropped"),
                  (d.bad_stopped, "lane stopped"),
                  (d.good_dead_lettered, "good dead-lettered"))  # fmt: skip
    said = [f"{n} {what}" for n, what in counts if n]
    return f"{d.dead_lettered}" + (f" ({', '.join(said)})" if said else "")


# An outbox relay's row: its sink stores messages, not an order's state (an order's entries go to
# two topics, stored one topic after the other), and no entry is a poison record.
NOT_A_FIGURE = "-"
# Each relay's published stage, under its rows: (header, right-aligned).
RELAY_STAGE_COLUMNS = (
    ("relay", False),
    ("written", True),
    ("published", True),
    ("copies", True),
    ("lost", True),
    ("history_lost", True),
)


def relayed(v: VariantResult) -> bool:
    """Whether ``v`` is an outbox relay's lane (its stage is its own, not a CDC source's)."""
    return v.relay is not None and not v.relay.source


def relay_stage_cells(v: VariantResult) -> list[str]:
    assert v.relay is not None
    p = v.relay.published
    return [v.label, str(p.acked), str(p.unique_in_sink), str(p.duplicates), str(p.lost),
            str(v.relay.history_lost)]  # fmt: skip


def expectation_text(v: VariantResult) -> str:
    return "pass" if v.passed else f"{v.outcome.word}: {v.reason}"


def variant_cells(v: VariantResult) -> list[str]:
    d = v.verdict
    return [
        v.runtime,
        v.variant,
        str(d.acked),
        str(d.in_sink),
        str(d.duplicates),
        str(d.duplicated_keys),
        copies_text(d.copies),
        str(d.lost),
        NOT_A_FIGURE if relayed(v) else str(d.stale),
        NOT_A_FIGURE if relayed(v) else dead_lettered_text(v),
        f"{v.events_per_s:.0f}",
        f"{v.crashes}/{v.restarts}",
        expectation_text(v),
    ]


def grid(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        padded = (
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        )
        return "  ".join(padded).rstrip()

    return [line(header), *(line(r) for r in rows)]


def headline(run: ScenarioResult) -> str:
    if run.error:
        return f"scenario {run.name}: NO RESULTS ({run.error})"
    seed = f"seed {run.seed}" if run.seed is not None else "no seed"
    where = f", {run.backend}" if run.backend else ""
    failed = len(run.failed)
    unfired = sum(1 for v in run.variants if v.unfired)
    verdict = f"{failed} of {len(run.variants)} variants FAILED" if failed else "pass"
    if unfired:
        verdict += f" ({unfired} with faults that did not fire)"
    return f"scenario {run.name} ({seed}{where}): {verdict}"


def render_table(run: ScenarioResult) -> str:
    """The per-variant table printed after a run."""
    header = [name for name, _ in COLUMNS]
    right = [r for _, r in COLUMNS]
    lines = [headline(run)]
    if run.variants:
        lines += grid(header, [variant_cells(v) for v in run.variants], right)
        if relays := [v for v in run.variants if relayed(v)]:
            lines += ["", "each relay's published stage (its target topics against the entries "
                      "MongoDB acknowledged); the rows above are its sink's:"]  # fmt: skip
            lines += grid([h for h, _ in RELAY_STAGE_COLUMNS],
                          [relay_stage_cells(v) for v in relays],
                          [r for _, r in RELAY_STAGE_COLUMNS])  # fmt: skip
        lines += [
            f"{v.label} stopped for good: {v.verdict.stopped}"
            for v in run.variants
            if v.verdict.stopped
        ]
    return "\n".join(lines)


def matrix(
    runs: Sequence[ScenarioResult],
) -> tuple[list[str], list[tuple[ScenarioResult, str, str, dict[str, VariantResult]]]]:
    """Variants as columns (in first-seen order) and one row per scenario and runtime: the run,
    its wall time on its first row only, the runtime and the runtime's variants."""
    variants: dict[str, None] = {}
    rows: list[tuple[ScenarioResult, str, str, dict[str, VariantResult]]] = []
    for run in runs:
        by_runtime: dict[str, dict[str, VariantResult]] = {}
        for v in run.variants:
            variants.setdefault(v.variant)
            by_runtime.setdefault(v.runtime, {})[v.variant] = v
        parts = list(by_runtime.items()) or [("", {})]
        wall = wall_text(run) + ("*" if beside(run, runs) else "")
        rows += [
            (run, wall if i == 0 else "", runtime, cells)
            for i, (runtime, cells) in enumerate(parts)
        ]
    return list(variants), rows


# results.json keeps a run's seconds to 0.01 s: its end, so derived, may be up to this much late.
# Without it, a run that starts just as the previous one ended overlaps it by rounding.
ROUNDED_S = 0.005


def beside(run: ScenarioResult, runs: Sequence[ScenarioResult]) -> list[ScenarioResult]:
    """The runs that were under way while ``run`` was (``chaoslab matrix --together``), from
    their own start times and wall times."""
    end = run.started_at + run.seconds - ROUNDED_S
    return [
        other
        for other in runs
        if other is not run
        and other.seconds
        and other.started_at < end
        and run.started_at < other.started_at + other.seconds - ROUNDED_S
    ]


# What sharing the environment means for a run's figures.
BESIDE_OVERLAP = "their wall times and events/s overlap"
# Said under a table whose wall times carry a star.
BESIDE_NOTE = (
    "* ran beside other scenarios (--together: on one environment where their faults act on "
    "their own runs only, on a second one where they act on the environment): " + BESIDE_OVERLAP
)


def run_label(run: ScenarioResult, runs: Sequence[ScenarioResult]) -> str:
    """The scenario's name, with its seed when ``runs`` hold it more than once (a soak)."""
    repeated = sum(1 for other in runs if other.name == run.name) > 1
    return f"{run.name} (seed {run.seed})" if repeated else run.name


def matrix_cell(v: VariantResult | None) -> str:
    """``duplicates/lost/stale verdict``, e.g. ``250/0/0 FAIL``."""
    if v is None:
        return "-"
    d = v.verdict
    stale = NOT_A_FIGURE if relayed(v) else d.stale
    return f"{d.duplicates}/{d.lost}/{stale} {v.outcome.word}"


def render_matrix_table(runs: Sequence[ScenarioResult]) -> str:
    """Scenario x variant: duplicates/lost/stale and the verdict per cell; each scenario's wall
    time on its first row."""
    variants, rows = matrix(runs)
    header = ["scenario", "wall", "runtime", *(variants or ["result"])]
    cells = []
    for run, wall, runtime, by_variant in rows:
        if run.error:
            row = [run_label(run, runs), wall, "-", f"NO RESULTS: {run.error}"]
        else:
            row = [
                run_label(run, runs),
                wall,
                runtime,
                *(matrix_cell(by_variant.get(v)) for v in variants),
            ]
            row += ["no variants"] if not variants else []
        cells.append(row + [""] * (len(header) - len(row)))
    lines = ["cells: duplicates/lost/stale expectation"]
    lines += grid(header, cells, [False, True] + [False] * (len(header) - 2))
    if any(beside(run, runs) for run in runs):
        lines.append(BESIDE_NOTE)
    lines.append(summary_line(runs))
    return "\n".join(lines)


def wall_text(run: ScenarioResult) -> str:
    """The scenario's wall time: ``41 s``, or ``-`` if it left no results."""
    return f"{run.seconds:.0f} s" if run.seconds else "-"


def summary_line(runs: Sequence[ScenarioResult]) -> str:
    total = sum(len(run.variants) for run in runs)
    failed = [f"{run.name} {v.label}" for run in runs for v in run.failed]
    missing = [run.name for run in runs if run.error]
    text = f"{len(runs)} scenarios, {total} variant runs: "
    text += f"{len(failed)} failed" + (f" ({', '.join(failed)})" if failed else "")
    # A race's expectation is judged over the runs, not in one: a run that broke it still
    # reads "pass", so the line says how many did.
    broke = sum(any(not r.held for r in v.rates) for run in runs for v in run.variants)
    if broke:
        text += f"; {broke} broke an expectation judged over the runs"
    if missing:
        text += f"; no results from {', '.join(missing)}"
    return text


SOAK_HEADER = ("scenario", "runtime", "variant", "expected", "figure", "anomalous", "not held")
EXPECTED = {Role.GUARDS: "exactly once", Role.DETECTS: "anomalies", Role.OTHER: "-"}


def soak_rows(cells: Sequence[SoakCell]) -> list[list[str]]:
    """One row of SOAK_HEADER per scenario x runtime x variant."""
    return [
        [
            c.scenario,
            c.runtime,
            c.variant,
            EXPECTED[c.role],
            c.figure,
            f"{c.anomalous}/{c.runs}",
            not_held_text(c),
        ]
        for c in cells
    ]


def soak_summary(cells: Sequence[SoakCell]) -> str:
    """The false alarms and the detections over every cell."""
    guards = [c for c in cells if c.role is Role.GUARDS]
    detects = [c for c in cells if c.role is Role.DETECTS]
    return (
        f"false alarms: {sum(len(c.failed) for c in guards)} in {sum(c.runs for c in guards)} "
        f"runs of variants expected to keep every change once; detected: "
        f"{sum(c.detected for c in detects)} of {sum(c.runs for c in detects)} runs expected to "
        "show duplicates or losses"
    )


def rate_lines(cells: Sequence[SoakCell]) -> list[str]:
    """Each expectation over seeds, a line each: ``scenario runtime/variant: duplicates > 0 in
    80% of runs: 9/10 (95%: 60-98%), holds``."""
    return [f"{c.scenario} {c.runtime}/{c.variant}: {r}" for c in cells for r in c.rates]


def soak_seeds(cells: Sequence[SoakCell]) -> int:
    return max((c.runs for c in cells), default=0)


def render_soak_table(cells: Sequence[SoakCell]) -> str:
    """Scenario x runtime x variant over the seeds: false alarms of the variants expected to
    keep every change once, detections of those expected to show an anomaly."""
    if not cells:  # every run died before a variant was judged: the matrix table says why
        return "soak: no run left results"
    lines = [
        f"soak: every scenario with {soak_seeds(cells)} seeds (anomalous: runs with duplicates "
        "or losses)"
    ]
    lines += grid(SOAK_HEADER, soak_rows(cells), [False] * 5 + [True, False])
    lines.append(soak_summary(cells))
    if rates := rate_lines(cells):
        lines += ["expectations over seeds:", *(f"  {line}" for line in rates)]
    return "\n".join(lines)


def not_held_text(c: SoakCell) -> str:
    """The seeds of the runs that did not hold, by why: ``failed 12, 15; unfired 13``."""
    parts = [
        f"{why} {', '.join(map(str, seeds))}"
        for why, seeds in (("failed", c.failed), ("unfired", c.unfired), ("died", c.died))
        if seeds
    ]
    return "; ".join(parts) or "-"
