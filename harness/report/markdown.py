"""report.md: one scenario's report, and the matrix report over several scenarios."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from harness.checker.bad_records import tally
from harness.results.model import ScenarioResult
from harness.results.soak import soak_cells

from .plots import ANOMALIES_PNG, THROUGHPUT_PNG, TIMELINE_PNG
from .table import (
    BESIDE_NOTE,
    BESIDE_OVERLAP,
    NOT_A_FIGURE,
    RELAY_STAGE_COLUMNS,
    SOAK_HEADER,
    beside,
    copies_text,
    dead_lettered_text,
    matrix,
    matrix_cell,
    rate_lines,
    relay_stage_cells,
    relayed,
    render_soak_table,
    run_label,
    soak_rows,
    soak_seeds,
    soak_summary,
    summary_line,
)

VARIANT_COLUMNS = (
    "runtime", "variant", "acked", "in_sink", "duplicates", "copies", "lost", "stale",
    "dead-lettered", "events/s", "crashes/restarts", "expectation",
)  # fmt: skip
NUMBER_COLUMNS = (
    "acked", "in_sink", "duplicates", "lost", "stale", "dead-lettered", "events/s",
    "crashes/restarts",
)  # fmt: skip
PLOT_TITLES = {
    ANOMALIES_PNG: "Duplicates, lost and stale per variant",
    TIMELINE_PNG: "Timeline: anomalies, fault windows and consumer crashes",
    THROUGHPUT_PNG: "Records written per second per variant",
}


def cell(text: object) -> str:
    """A table cell: a ``|`` or a newline would end the cell or the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(
    header: Sequence[str], rows: Sequence[Sequence[object]], numbers: Sequence[str] = ()
) -> list[str]:
    """A markdown table; the columns named in ``numbers`` are right-aligned."""
    align = ["---:" if h in numbers else "---" for h in header]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix)) if unix else "unknown"


def _workload(run: ScenarioResult) -> str:
    w = run.workload
    if "writes" in w:  # an outbox application's (seed 003)
        mix = ", ".join(f"{op} {weight}" for op, weight in w.get("mix", {}).items())
        rate = f", {w['rate']} writes/s" if w.get("rate") else ""
        return (f"{w['writes']} application writes to {w.get('documents')} orders ({mix}), "
                f"their outboxes to topics {', '.join(w.get('topics', []))}, "
                f"{w.get('partitions')} partitions{rate}")  # fmt: skip
    shown = [
        f"{w[k]} {label}"
        for k, label in (("events", "events"), ("keys", "keys"), ("partitions", "partitions"))
        if k in w
    ]
    for k in ("key_skew", "poison_fraction", "resend_fraction", "delete_fraction", "rate"):
        if w.get(k):
            shown.append(f"{k} {w[k]}")
    return ", ".join(shown) or "not recorded"


def scenario_markdown(
    run: ScenarioResult,
    plots: Sequence[str],
    story: Sequence[str],
    alongside: Sequence[ScenarioResult] = (),
) -> str:
    """The scenario's report; ``plots`` are image paths relative to the report;
    ``alongside``, the runs of its matrix under way while it was (``--together``)."""
    verdict = "pass" if run.passed else "FAIL"
    if run.error:
        verdict = "NO RESULTS"
    lines = [f"# {run.name}: {verdict}", ""]
    if run.description:
        lines += [*(f"> {line}" if line else ">" for line in run.description.splitlines()), ""]
    facts = [
        ("Seed", run.seed if run.seed is not None else "not recorded"),
        ("Backend", run.backend or "not recorded"),
        ("Started", _when(run.started_at)),
        ("Duration", f"{run.seconds:.1f} s"),
        ("Workload", _workload(run)),
        ("Scenario file", f"`{run.file}`" if run.file else "not recorded"),
        (
            "Versions",
            ", ".join(f"{k} {v}" for k, v in run.versions.items()) or "not recorded",
        ),
    ]
    if alongside:
        names = ", ".join(f"{o.name} (seed {o.seed})" for o in alongside)
        facts.append(("Ran beside", f"{names} (--together): {BESIDE_OVERLAP}"))
    lines += [f"- **{name}**: {value}" for name, value in facts]
    if run.error:
        lines += ["", f"**No results**: {run.error}", ""]
        return "\n".join(lines)

    failed = len(run.failed)
    lines += ["", "## Results", ""]
    lines.append(
        f"{len(run.variants) - failed} of {len(run.variants)} variants met their expectations."
        if run.variants
        else "No variant results were recorded."
    )
    lines.append("")
    rows = []
    for v in run.variants:
        d = v.verdict
        expectation = "pass" if v.passed else f"**{v.outcome.word}**: {v.reason}"
        rows.append([
            v.runtime, v.variant, d.acked, d.in_sink, d.duplicates, copies_text(d.copies),
            d.lost, NOT_A_FIGURE if relayed(v) else d.stale,
            NOT_A_FIGURE if relayed(v) else dead_lettered_text(v), f"{v.events_per_s:.0f}",
            f"{v.crashes}/{v.restarts}", expectation,
        ])  # fmt: skip
    source = next((v.relay for v in run.variants if v.relay and v.relay.source), None)
    if source is not None and source.relayed_by:
        on = source.published
        lines += [
            f"**The source** (seed 003's application, its outbox carried to the lanes' topic by "
            f"the {source.relayed_by} relay; every lane's): {on.expected} entries written; on "
            f"the topic {on.unique_in_sink}, {on.duplicates} of them again (published again), "
            f"{on.lost} never (lost at publish)"
            + (f"; resume point lost {source.history_lost} time(s)" if source.history_lost else "")
            + ". The lanes below are counted against the same entries.",
            "",
        ]
    elif source is not None:
        on = source.published
        what = f"{on.expected} changes committed"
        if read := source.snapshot_rows:
            what = (f"{read} rows in the table when Debezium started (what its snapshot was to "
                    f"read) and {on.expected - read} changes committed after")  # fmt: skip
        begun, finished = source.snapshots
        lines += [
            f"**The source** (Debezium, from PostgreSQL's log; every lane's): {what}; on the "
            f"change topic {on.unique_in_sink}, {on.duplicates} of them again (re-emitted), "
            f"{on.lost} never (lost at the source)"
            + (f"; snapshots begun {begun}, finished {finished}" if begun else "")
            + (f"; it stopped for good: {on.stopped}" if on.stopped else "")
            + ". The lanes below are counted against the same commits.",
            "",
        ]
    if relays := [v for v in run.variants if relayed(v)]:
        lines += [
            "**Each relay's published stage**: its target topics against the entries MongoDB "
            "acknowledged to the application (*copies*: entries published more than once; "
            "*history_lost*: resumes the oplog no longer held). The table after it is each "
            "relay's sink: what the scenario's sink variant stored of its topics.",
            "",
            *table(
                [h for h, _ in RELAY_STAGE_COLUMNS],
                [relay_stage_cells(v) for v in relays],
                numbers=[h for h, right in RELAY_STAGE_COLUMNS if right],
            ),
            "",
        ]
    if rows:
        lines += table(VARIANT_COLUMNS, rows, numbers=NUMBER_COLUMNS)
        lines += [
            "",
            "*duplicates*: extra copies in the sink; *copies*: business changes by how many "
            "copies they have; *lost*: acked changes absent from the sink; *stale*: orders "
            "whose current state is behind their last acked version; *events/s*: records "
            "consumed per second, first batch to last commit"
            + ("; a relay's, entries it published per second." if relays else "."),
        ]
        lines += [
            f"\n**{v.label} stopped for good**: {v.verdict.stopped}"
            for v in run.variants
            if v.verdict.stopped
        ]
        lines += bad_records_section(run)
        topic = [v for v in run.variants if v.verdict.topic_duplicates]
        if topic:
            counted = ", ".join(f"{v.label} {v.verdict.topic_duplicates}" for v in topic)
            lines += [
                "",
                f"**The topic's copies** (not in *duplicates*): Kafka held records more than "
                f"once, so every consumer was handed them again - {counted} (see What happened).",
            ]
        expectations = [v for v in run.variants if v.expectations]
        if expectations:
            lines += ["", "Expectations checked:", ""]
            lines += [f"- {v.label}: {', '.join(v.expectations)}" for v in expectations]

    lines += ["", "## What happened", "", "Times are seconds since the run started.", ""]
    lines += [f"- {sentence}" for sentence in story]
    if plots:
        lines += ["", "## Plots", ""]
        for path in plots:
            title = PLOT_TITLES.get(path.rsplit("/", 1)[-1], path)
            lines += [f"### {title}", "", f"![{title}]({path})", ""]
    lines += [
        "## Files",
        "",
        "- `results.json`: every count above, and the anomalies with their times",
        "- `junit.xml`: one test case per runtime/variant",
    ]
    for v in run.variants:
        if v.directory is not None and run.directory is not None:
            try:
                where = v.directory.relative_to(run.directory)
            except ValueError:
                where = v.directory
            lines.append(f"- `{where}/`: {v.label}'s history, logs and runtime configuration")
    return "\n".join(lines).rstrip() + "\n"


SHOWN_DISPLACING = 5  # bad records named per lane for the good changes they displaced
SHOWN_RUNS = 5  # runs of good records dead-lettered named per lane


def bad_records_section(run: ScenarioResult) -> list[str]:
    """Where each lane's bad records went, a row per shape and a column per lane (the lanes
    whose writes were followed), and the bad records that displaced a good change, named."""
    followed = [v for v in run.variants if v.verdict.followed and v.verdict.bad]
    if not followed:
        return []
    tallies = {v.label: tally(v.verdict.bad) for v in followed}
    shapes = sorted({shape for t in tallies.values() for shape in t})

    def cell(label: str, shape: str) -> str:
        return ", ".join(f"{n} {what}" for what, n in tallies[label].get(shape, {}).items()) or "-"

    rows = [[shape, *(cell(v.label, shape) for v in followed)] for shape in shapes]
    lines = ["", "**Where the bad records went** (each lane's writes followed; *merged*: into "
             "or over another record's document, *dropped*: no trace):", ""]  # fmt: skip
    lines += table(["shape", *(v.label for v in followed)], rows, numbers=[])
    for v in followed:
        took = [f for f in v.verdict.bad if f.change is not None]
        if took:
            lines += ["", f"**{v.label}: {len(took)} good change(s) displaced by a bad record** "
                      f"(counted lost): " + "; ".join(f.describe() for f in took[:SHOWN_DISPLACING])
                      + ("; ..." if len(took) > SHOWN_DISPLACING else "")]  # fmt: skip
        good = v.verdict.dead_lettered_good
        if good:
            lines += ["", f"**{v.label}: {v.verdict.good_dead_lettered} good record(s) "
                      "dead-lettered** (counted lost where stored nowhere else): "
                      + "; ".join(g.describe() for g in good[:SHOWN_RUNS])
                      + ("; ..." if len(good) > SHOWN_RUNS else "")]  # fmt: skip
    return lines


def matrix_markdown(runs: Sequence[ScenarioResult], links: Sequence[str | None]) -> str:
    """The scenario x variant table, each scenario linked to its own report."""
    variants, rows = matrix(runs)
    link_of = {id(run): link for run, link in zip(runs, links, strict=True)}
    failed = sum(len(run.failed) for run in runs)
    total = sum(len(run.variants) for run in runs)
    missing = [run for run in runs if run.error]
    verdict = "pass" if not failed and not missing else "FAIL"
    lines = [f"# Scenario matrix: {verdict}", ""]
    lines.append(
        f"{len(runs)} scenarios, {total} runtime/variant runs, {failed} failed their "
        "expectations" + (f", {len(missing)} left no results" if missing else "") + "."
    )
    lines += ["", "Each cell: duplicates / lost / stale, and the expectation's verdict.", ""]
    header = ["scenario", "wall", "runtime", *(variants or ["result"])]
    body = []
    for run, wall, runtime, by_variant in rows:
        link = link_of[id(run)]
        name = f"[{run_label(run, runs)}]({link})" if link else run_label(run, runs)
        if run.error:
            row = [name, wall, "-", f"no results: {run.error}"]
        else:
            row = [
                name,
                wall,
                runtime,
                *(_md_cell(matrix_cell(by_variant.get(v))) for v in variants),
            ]
        body.append(row + [""] * (len(header) - len(row)))
    lines += table(header, body)
    if any(beside(run, runs) for run in runs):
        lines += ["", BESIDE_NOTE.replace("*", r"\*", 1)]
    if max(Counter(run.name for run in runs).values(), default=1) > 1:
        lines += ["", "## Soak", "", "```", render_soak_table(soak_cells(runs)), "```"]
    lines += ["", "## Scenarios", ""]
    for run, link in zip(runs, links, strict=True):
        desc = _first_sentence(run.description)
        name = f"[{run_label(run, runs)}]({link})" if link else run_label(run, runs)
        state = "NO RESULTS" if run.error else ("pass" if run.passed else "FAIL")
        lines.append(f"- {name}: {state}" + (f": {desc}" if desc else ""))
    return "\n".join(lines) + "\n"


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def _md_cell(text: str) -> str:
    return text.replace("FAIL", "**FAIL**").replace("UNFIRED", "**UNFIRED**")


def soak_markdown(
    runs: Sequence[ScenarioResult], *, wall_s: float, command: str, revision: str, cores: int
) -> str:
    """The page ``make soak`` writes: how often each scenario x runtime x variant held over
    the seeds, with what it was measured with."""
    cells = soak_cells(runs)
    seeds = soak_seeds(cells)
    backends = ", ".join(sorted({run.backend for run in runs if run.backend})) or "unknown"
    started = min((run.started_at for run in runs if run.started_at), default=0.0)
    lines = [
        "# Soak figures",
        "",
        f"Written by `make soak` (`{command}`); the next one writes it again, so do not edit it "
        "by hand. What the figures mean: [scenarios.md](scenarios.md#soak-figures).",
        "",
        f"* **{soak_summary(cells)}**.",
        f"* {len({run.name for run in runs})} scenarios, each with {seeds} seeds (its own seed "
        f"and the {seeds - 1} after it): {summary_line(runs)}; {len(runs)} scenario runs in "
        f"{wall_s / 60:.1f} min.",
        f"* Measured {_when(started)} with chaoslab {revision}, on the {backends} backend, "
        f"{cores} cores.",
        "",
    ]
    lines += table(SOAK_HEADER, soak_rows(cells), numbers=("anomalous",))
    if rates := rate_lines(cells):
        lines += ["", "Expectations over seeds (a race's outcome, judged over the seeds):", ""]
        lines += [f"* {line}" for line in rates]
    lines += [
        "",
        "* expected: *exactly once* - the variant's expectations say it keeps every change "
        "once, so a run that did not is a false alarm; *anomalies* - it is expected to "
        "duplicate or lose, so a run that did is a detection; *-* neither (e.g. naive through "
        "a MongoDB partition, which may or may not duplicate): *held* counts the runs whose "
        "expectations held.",
        "* figure: the runs, with the 95% Wilson interval of the share they are of.",
        "* anomalous: runs with duplicates or losses in the sink.",
        "* not held: the seeds of the runs that failed an expectation, in which a planned "
        "fault did not fire, or that left no results.",
    ]
    return "\n".join(lines) + "\n"
