"""The report (harness.report): run directories built synthetically, no servers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from harness.checker.bad_records import BadRecord, Fate, GoodDeadLettered, Outcome
from harness.history.events import EventKind, HistoryEvent, HistoryWriter
from harness.report import (
    render_matrix_table,
    render_soak_table,
    render_table,
    timeline,
    what_happened,
    write_matrix_report,
    write_report,
)
from harness.report.markdown import soak_markdown
from harness.report.story import anomaly_sentences, fault_sentences
from harness.report.table import BESIDE_NOTE, beside
from harness.report.timeline import (
    Death,
    Pause,
    clusters,
    consumer_deaths,
    consumer_pauses,
    idle_stretches,
    windows_of,
)
from harness.results.model import RateCheck, ScenarioResult, UntimedFault, load
from harness.results.soak import Role, soak_cells
from harness.workload.events import Kind
from harness.workload.ledger import LedgerRow, LedgerWriter

T0 = 1_700_000_000.0  # the run's start: every "+N s" below is relative to it
LEDGER = "listener-abc123.ledger.csv"
NAIVE_REASON = "expected duplicates == 0, got 5; expected lost == 0, got 1"


def ev(t: float, kind: EventKind, source: str, **fields: Any) -> HistoryEvent:
    return HistoryEvent(t=T0 + t, kind=kind, source=source, **fields)


def nemesis_events() -> list[HistoryEvent]:
    return [
        ev(
            5.0,
            EventKind.FAULT_START,
            "nemesis",
            fault="broker-rolling-restart#1",
            detail="broker-rolling-restart",
        ),
        ev(
            6.0,
            EventKind.FAULT_STEP,
            "nemesis",
            fault="broker-rolling-restart#1",
            count=1,
            detail="node 1 SIGTERM",
        ),
        ev(
            9.5,
            EventKind.FAULT_STEP,
            "nemesis",
            fault="broker-rolling-restart#1",
            count=2,
            detail="node 2 SIGTERM",
        ),
        ev(
            12.0,
            EventKind.FAULT_END,
            "nemesis",
            fault="broker-rolling-restart#1",
            detail="broker-rolling-restart",
        ),
        ev(
            20.0,
            EventKind.FAULT_START,
            "nemesis",
            fault="producer-resend#1",
            detail="producer-resend",
        ),
        ev(
            20.01,
            EventKind.FAULT_END,
            "nemesis",
            fault="producer-resend#1",
            detail="producer-resend",
        ),
        ev(
            25.0,
            EventKind.FAULT_START,
            "nemesis",
            fault="mongo-partition#1",
            detail="mongo-partition",
        ),  # never ends
    ]


def consumer_events(crash: bool) -> list[HistoryEvent]:
    """Batches of 100 every second from +2 s; with ``crash``, killed after writing batch 7 at
    +8.2 s, restarted at +9.5 s, batches again from +14 s."""
    out = [
        ev(0.5, EventKind.RUN_START, "harness", detail="listener"),
        ev(1.0, EventKind.RUNTIME_START, "listener-0", detail="pid 1"),
    ]
    for i, t in enumerate([2, 3, 4, 5, 6, 7, 8], start=1):
        out += [
            ev(t, EventKind.BATCH, "listener-0", batch=i, count=100),
            ev(t + 0.1, EventKind.WRITTEN, "listener-0", batch=i, count=100),
        ]
        if not (crash and i == 7):
            out.append(ev(t + 0.15, EventKind.COMMIT, "listener-0", offsets={0: 100 * i}))
    later = [14, 15, 16] if crash else [9, 10, 11]
    if crash:
        out += [
            ev(8.2, EventKind.CRASH, "listener-0", batch=7, detail="after_write_before_commit"),
            ev(8.3, EventKind.RUNTIME_EXIT, "harness", detail="listener-0 killed by SIGKILL"),
            ev(9.5, EventKind.RUNTIME_START, "listener-0", detail="pid 2"),
        ]
    for i, t in enumerate(later, start=1):
        out += [
            ev(t, EventKind.BATCH, "listener-0", batch=i, count=100),
            ev(t + 0.1, EventKind.WRITTEN, "listener-0", batch=i, count=100),
        ]
    out += [
        ev(29.0, EventKind.RUNTIME_EXIT, "listener-0", detail="stopped"),
        ev(30.0, EventKind.RUN_END, "harness"),
    ]
    return out


def anomaly(kind: str, t: float, window: str | None = None, order: int = 1) -> dict[str, Any]:
    return {"kind": kind, "order_id": order, "version": 1, "at": T0 + t, "window": window}


def variant_entry(run_dir: Path, variant: str, **overrides: Any) -> dict[str, Any]:
    entry = {
        "runtime": "listener", "variant": variant, "produced": 1000, "acked": 1000,
        "expected": 1000, "in_sink": 1000, "unique_in_sink": 1000, "duplicates": 0,
        "duplicated_keys": 0, "copies": {}, "lost": 0, "phantoms": 0, "stale": 0,
        "dead_lettered": 0, "poison_missing": 0, "offsets_consistent": None, "anomalies": [],
        "anomalies_total": 0, "topic_duplicates": 0, "events_per_s": 250.0, "seconds": 30.0,
        "restarts": 0, "crashes": 0, "faults": [], "expectations": ["duplicates == 0", "lost == 0"],
        "expectation": "pass", "reason": "every expectation holds",
        "directory": str(run_dir / f"listener-{variant}"), "ledger": str(run_dir / LEDGER),
    }  # fmt: skip
    entry.update(overrides)
    return entry


def results(run_dir: Path, name: str = "broker-bounce") -> dict[str, Any]:
    """listener/naive fails (5 duplicates, 1 lost, 1 stale, a crash); listener/idempotent
    passes; both ran side by side under the same faults."""
    naive = variant_entry(
        run_dir, "naive",
        in_sink=1005, duplicates=5, duplicated_keys=4, copies={"2": 3, "3": 1}, lost=1,
        stale=1, restarts=1, crashes=1, expectation="fail", reason=NAIVE_REASON,
        anomalies=[
            anomaly("duplicate", 6.0, order=1),
            anomaly("duplicate", 6.5, "broker-rolling-restart#1", order=2),
            anomaly("duplicate", 14.1, order=3),
            anomaly("duplicate", 14.2, order=4),
            anomaly("duplicate", 14.3, order=4),
            anomaly("lost", 21.0, order=5),
            anomaly("stale", 26.0, order=6),
        ],
        anomalies_total=7,
        faults=[{"name": "crash-after-write", "kind": "crash"}],
    )  # fmt: skip
    return {
        "scenario": {
            "name": name,
            "file": "scenarios/broker-bounce.yaml",
            "description": "Rolling broker restarts and one consumer crash.",
        },
        "seed": 42,
        "workload": {"events": 1000, "keys": 100, "partitions": 3},
        "backend": "local",
        "versions": {"python": "3.11.7", "kafka": "4.3.1"},
        "started_at": T0,
        "seconds": 31.5,
        "passed": False,
        "results": [naive, variant_entry(run_dir, "idempotent")],
    }


def write_history(directory: Path, events: list[HistoryEvent]) -> None:
    """One JSON-lines file per writer, as HistoryWriter lays them out."""
    directory.mkdir(parents=True, exist_ok=True)
    by_source: dict[str, list[HistoryEvent]] = {}
    for e in events:
        by_source.setdefault(e.source, []).append(e)
    for source, mine in by_source.items():
        with (directory / f"{source}-1.jsonl").open("a") as f:
            f.writelines(e.to_json() + "\n" for e in mine)


def make_run_dir(
    run_dir: Path, name: str = "broker-bounce", raw: dict[str, Any] | None = None
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    written = raw if raw is not None else results(run_dir, name)
    (run_dir / "results.json").write_text(json.dumps(written, indent=2))
    for variant, crash in (("naive", True), ("idempotent", False)):
        history = run_dir / f"listener-{variant}" / "history"
        write_history(history, consumer_events(crash) + nemesis_events())
        # One event through the real writer: what the runner writes must read back.
        writer = HistoryWriter(history, "harness", variant)
        writer.record(EventKind.PRODUCED, count=1000)
        writer.close()
    with LedgerWriter(run_dir / LEDGER) as ledger:
        for seq in range(1000):
            row = LedgerRow(
                seq=seq,
                event_id=f"e-{seq}",
                order_id=seq % 100,
                version=seq // 100 + 1,
                kind=Kind.NORMAL,
                topic="orders",
                partition=seq % 3,
                offset=seq // 3,
                acked_at=T0 + 1.0 + seq * 0.002,
            )
            ledger.append(row)
    return run_dir


def in_memory_run() -> ScenarioResult:
    """The same run without files: the records the report's pure functions work on."""
    run = ScenarioResult.from_json(results(Path("/nowhere")))
    events = {"naive": consumer_events(True), "idempotent": consumer_events(False)}
    return replace(
        run,
        variants=tuple(
            replace(v, events=tuple(sorted(events[v.variant] + nemesis_events(), key=_t)))
            for v in run.variants
        ),
    )


def _t(e: HistoryEvent) -> float:
    return e.t


# --- the timeline and the "what happened" list (pure) ---------------------------------------


def test_timeline_puts_anomalies_in_their_rows_at_their_times() -> None:
    naive, idempotent = timeline(in_memory_run()).rows
    assert (naive.label, idempotent.label) == ("listener/naive", "listener/idempotent")
    assert naive.group == idempotent.group  # one ledger: they ran side by side
    assert naive.times("duplicate") == pytest.approx([6.0, 6.5, 14.1, 14.2, 14.3])
    assert naive.times("lost") == pytest.approx([21.0])
    assert naive.times("stale") == pytest.approx([26.0])
    assert [m.window for m in naive.anomalies if m.kind == "duplicate"] == [
        "broker-rolling-restart#1",  # placed by its time, the checker named none
        "broker-rolling-restart#1",  # named by the checker
        None,
        None,
        None,
    ]
    assert [m.window for m in naive.anomalies if m.kind != "duplicate"] == [
        None,  # +21 s: after the instantaneous resend at +20 s
        "mongo-partition#1",  # +26 s: the window that never ended lasts to the run's end
    ]
    assert idempotent.anomalies == ()
    assert naive.counts == {"duplicate": 5, "lost": 1, "stale": 1}
    assert naive.span == pytest.approx((0.5, 30.0))


def test_timeline_windows_are_where_the_history_says() -> None:
    naive, idempotent = timeline(in_memory_run()).rows
    expected = [
        ("broker-rolling-restart#1", "broker-rolling-restart", 5.0, 12.0, False, False),
        ("producer-resend#1", "producer-resend", 20.0, 20.01, True, False),
        ("mongo-partition#1", "mongo-partition", 25.0, 30.0, False, True),
    ]
    for row in (naive, idempotent):
        got = [(w.name, w.kind, w.start, w.end, w.instant, w.open_ended) for w in row.windows]
        assert [g[:2] for g in got] == [e[:2] for e in expected]
        assert [g[2:4] for g in got] == [pytest.approx(e[2:4]) for e in expected]
        assert [g[4:] for g in got] == [e[4:] for e in expected]
        # The broker bounces inside the rolling restart, each at its moment.
        assert [(s.fault, s.number) for s in row.steps] == [
            ("broker-rolling-restart#1", 1),
            ("broker-rolling-restart#1", 2),
        ]
        assert [s.t for s in row.steps] == pytest.approx([6.0, 9.5])


def test_timeline_crashes_and_restarts_on_the_crashed_variant_only() -> None:
    naive, idempotent = timeline(in_memory_run()).rows
    # The supervisor's "killed by SIGKILL" 0.1 s after the CRASH is the same death.
    assert [(d.t, d.consumer, d.how, d.planned, d.batch) for d in naive.deaths] == [
        (pytest.approx(8.2), "listener-0", "after_write_before_commit", True, 7)
    ]
    assert [(r.t, r.consumer, r.next_batch) for r in naive.restarts] == [
        (pytest.approx(9.5), "listener-0", pytest.approx(14.0))
    ]
    assert naive.idle == (pytest.approx((8.1, 14.0)),)
    assert (idempotent.deaths, idempotent.restarts, idempotent.idle) == ((), (), ())


def test_what_happened_for_a_known_run() -> None:
    lines = what_happened(in_memory_run())
    assert lines == [
        "Fault broker-rolling-restart#1 from +5.0 s to +12.0 s (7.0 s) on every variant; "
        "went down: node 1 at +6.0 s, node 2 at +9.5 s.",
        "Fault producer-resend#1 at +20.0 s on every variant.",
        "Fault mongo-partition#1 from +25.0 s, never ended (until +30.0 s, the variant's end) "
        "on every variant.",
        "Faults configured, with no time window recorded: crash-after-write.",
        "listener/naive: listener-0 crashed at after_write_before_commit (batch 7) at +8.2 s; "
        "restarted at +9.5 s, its next batch at +14.0 s.",
        "listener/naive: no batch in hand from +8.1 s to +14.0 s (5.9 s).",
        "listener/naive: 2 of 5 duplicates were written inside fault window "
        "broker-rolling-restart#1, between +6.0 s and +6.5 s.",
        "listener/naive: 3 of 5 duplicates were written within 6.1 s after the crash of "
        "listener-0 at +8.2 s (after_write_before_commit, batch 7), between +14.1 s and +14.3 s.",
        "listener/naive: 1 of 1 lost changes were acked at +21.0 s, outside any fault window.",
        "listener/naive: 1 of 1 stale orders were last acked inside fault window "
        "mongo-partition#1, at +26.0 s.",
        f"listener/naive: expectation failed: {NAIVE_REASON}.",
        "listener/idempotent: no duplicates, lost changes or stale orders.",
    ]


def test_copies_inside_a_fault_window_name_the_lanes_own_crash_before_them() -> None:
    """A consumer crash point inside a fault's window (a source's worker bounced meanwhile):
    the copies are not the fault's alone, and the sentence says what else came before them."""
    naive = timeline(in_memory_run()).rows[0]
    crashed = replace(naive, deaths=(Death(5.6, "listener-0", "mid_write", True, 3),))
    assert anomaly_sentences(crashed, "duplicate")[0] == (
        "listener/naive: 2 of 5 duplicates were written inside fault window "
        "broker-rolling-restart#1, between +6.0 s and +6.5 s, 0.4 s after the crash of "
        "listener-0 at +5.6 s (mid_write, batch 3)."
    )
    # One before the window opened is not its cause inside it.
    before = replace(naive, deaths=(Death(4.0, "listener-0", "mid_write", True, 3),))
    assert anomaly_sentences(before, "duplicate")[0].endswith("between +6.0 s and +6.5 s.")


def test_what_happened_without_faults_and_with_old_fault_strings() -> None:
    run = in_memory_run()
    bare = replace(
        run,
        variants=tuple(
            replace(v, events=tuple(e for e in v.events if e.source != "nemesis"), faults=())
            for v in run.variants
        ),
    )
    assert fault_sentences(bare, timeline(bare).rows) == ["No faults were applied."]
    old = replace(
        bare,
        variants=tuple(
            replace(
                v,
                faults=(
                    UntimedFault.from_json("crash at after_write_before_commit (batch 3, 1x)"),
                ),
            )
            for v in bare.variants
        ),
    )
    assert fault_sentences(old, timeline(old).rows) == [
        "Faults configured, with no time window recorded: "
        "crash at after_write_before_commit (batch 3, 1x)."
    ]


def test_duplicates_before_any_crash_and_truncated_anomalies() -> None:
    run = in_memory_run()
    naive = run.variants[0]
    verdict = replace(
        naive.verdict,
        duplicates=40,
        anomalies=[a for a in naive.verdict.anomalies if a.kind == "duplicate"][2:],
        anomalies_total=42,
    )
    early = replace(naive, verdict=verdict, events=tuple(consumer_events(False)), faults=())
    lines = what_happened(replace(run, variants=(early,)))
    assert (
        "listener/naive: 3 of 40 duplicates were written between +14.1 s and +14.3 s, with no "
        "fault window before them."
    ) in lines
    assert "listener/naive: results.json gives times for 3 of the 40 duplicates." in lines


def test_a_window_comes_from_the_history_only() -> None:
    # results.json of older runs listed windows with times: read as names, never drawn
    old = UntimedFault.from_json({"name": "broker-kill#1", "kind": "broker-kill", "start": T0 + 3})
    assert (old.name, old.kind) == ("broker-kill#1", "broker-kill")
    assert windows_of([], T0) == ()
    events = [
        ev(3.0, EventKind.FAULT_START, "nemesis", fault="broker-kill#1", detail="broker-kill"),
        ev(4.0, EventKind.FAULT_END, "nemesis", fault="broker-kill#1", detail="broker-kill"),
    ]
    (window,) = windows_of(events, T0)
    assert (window.name, window.kind, window.start, window.end) == (
        "broker-kill#1", "broker-kill", 3.0, 4.0,
    )  # fmt: skip


def test_fault_windows_pair_starts_and_ends_by_name() -> None:
    events = [
        ev(1.0, EventKind.FAULT_START, "nemesis", fault="a#1"),
        ev(2.0, EventKind.FAULT_START, "nemesis", fault="b#1"),
        ev(3.0, EventKind.FAULT_END, "nemesis", fault="a#1"),
        ev(4.0, EventKind.FAULT_END, "nemesis", fault="c#1"),  # no start: ignored
        ev(5.0, EventKind.FAULT_END, "nemesis", fault="b#1"),
        ev(6.0, EventKind.FAULT_START, "nemesis", fault="a#2"),
    ]
    got = [(w.name, w.start, w.end, w.open_ended) for w in windows_of(events, T0, T0 + 9)]
    assert got == [("a#1", 1.0, 3.0, False), ("b#1", 2.0, 5.0, False), ("a#2", 6.0, 9.0, True)]


def test_a_death_without_a_crash_point() -> None:
    events = [ev(3.0, EventKind.RUNTIME_EXIT, "harness", detail="listener-1 exited with status 1")]
    (death,) = consumer_deaths(events, T0)
    assert (death.t, death.consumer, death.how, death.planned) == (
        3.0, "listener-1", "exited with status 1", False,
    )  # fmt: skip


def test_clusters() -> None:
    assert clusters([5.0, 1.0, 1.1, 1.15, 9.0, 9.3], gap=0.2) == [
        (1.0, 1.15, 3),
        (5.0, 5.0, 1),
        (9.0, 9.0, 1),
        (9.3, 9.3, 1),
    ]
    assert clusters([], gap=1.0) == []


# --- the files -------------------------------------------------------------------------------


def test_write_report_writes_readable_files(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    report = write_report(run_dir)
    assert report.markdown == run_dir / "report.md"
    assert report.junit == run_dir / "junit.xml"
    assert [p.name for p in report.plots] == ["anomalies.png", "timeline.png", "throughput.png"]
    for png in report.plots:
        image = matplotlib.image.imread(png)
        height, width = image.shape[:2]
        assert 400 <= width <= 2000 and 300 <= height <= 1500, (png.name, image.shape)
        assert image[..., :3].std() > 0.05, f"{png.name} is blank"


def test_load_run_reads_histories_and_ledger(tmp_path: Path) -> None:
    run = load(make_run_dir(tmp_path / "run"))
    naive, idempotent = run.variants
    assert (run.name, run.seed, run.started_at) == ("broker-bounce", 42, T0)
    assert naive.failures == (
        "expected duplicates == 0, got 5",
        "expected lost == 0, got 1",
    )
    assert naive.verdict.copies == {2: 3, 3: 1}
    assert sum(e.kind is EventKind.CRASH for e in naive.events) == 1
    assert any(e.kind is EventKind.PRODUCED for e in naive.events)  # the real writer's file
    assert len(naive.acked_at) == 1000 and naive.acked_at[0] == pytest.approx(T0 + 1.0)
    assert idempotent.acked_at is naive.acked_at  # one ledger, read once


def test_a_moved_run_directory_still_finds_its_files(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    moved = tmp_path / "downloaded"
    run_dir.rename(moved)  # results.json still names tmp_path/run/...
    run = load(moved)
    assert run.variants[0].directory == moved / "listener-naive"
    assert run.variants[0].events and len(run.variants[0].acked_at) == 1000


def test_junit_has_one_failure_for_the_failing_variant(tmp_path: Path) -> None:
    report = write_report(make_run_dir(tmp_path / "run"))
    root = ET.parse(report.junit).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == (
        "broker-bounce", "2", "1",
    )  # fmt: skip
    assert suite.get("errors") == "0" and suite.get("timestamp") == "2023-11-14T22:13:20"
    cases = suite.findall("testcase")
    assert [(c.get("name"), c.get("classname")) for c in cases] == [
        ("listener/naive", "broker-bounce"),
        ("listener/idempotent", "broker-bounce"),
    ]
    assert float(cases[0].get("time", "")) == 30.0
    (failure,) = cases[0].findall("failure")
    assert failure.get("message") == NAIVE_REASON
    assert "expected lost == 0, got 1" in (failure.text or "")
    assert cases[1].find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["seed"] == "42" and props["version.kafka"] == "4.3.1"


def test_report_md_has_each_variant_row_and_the_plots(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    text = write_report(run_dir).markdown.read_text()
    assert text.startswith("# broker-bounce: FAIL\n")
    assert "> Rolling broker restarts and one consumer crash." in text
    assert "- **Seed**: 42" in text and "- **Backend**: local" in text
    assert "python 3.11.7, kafka 4.3.1" in text
    assert (
        "| listener | naive | 1000 | 1005 | 5 | 2x: 3, 3x: 1 | 1 | 1 | 0 | 250 | 1/1 | "
        f"**FAIL**: {NAIVE_REASON.replace('|', '')} |"
    ) in text
    assert "| listener | idempotent | 1000 | 1000 | 0 | - | 0 | 0 | 0 | 250 | 0/0 | pass |" in text
    for png in ("anomalies.png", "timeline.png", "throughput.png"):
        assert f"]({png})" in text
        assert (run_dir / png).is_file()
    assert "- listener/naive: 3 of 5 duplicates were written within 6.1 s after the crash" in text
    assert "- Fault broker-rolling-restart#1 from +5.0 s to +12.0 s (7.0 s)" in text


def test_render_table(tmp_path: Path) -> None:
    raw = results(tmp_path)

    parsed = ScenarioResult.from_json(raw)
    # What the runner holds renders as what results.json gives back.
    for given in (parsed, ScenarioResult.from_json(parsed.to_json())):
        lines = render_table(given).splitlines()
        assert lines[0] == "scenario broker-bounce (seed 42, local): 1 of 2 variants FAILED"
        assert lines[1].split() == [
            "runtime", "variant", "acked", "in_sink", "dup", "dup_keys", "copies", "lost",
            "stale", "dlq", "ev/s", "crash/restart", "expectation",
        ]  # fmt: skip
        assert lines[2].split() == [
            "listener", "naive", "1000", "1005", "5", "4", "2x:", "3,", "3x:", "1", "1", "1",
            "0", "250", "1/1", "FAIL:", *NAIVE_REASON.split(),
        ]  # fmt: skip
        assert lines[3].split()[-1] == "pass"
        # The numbers line up under their headers.
        assert lines[1].index("dup_keys") + len("dup_keys") == lines[2].index(" 4 ") + 2


def test_matrix_report(tmp_path: Path) -> None:
    first = make_run_dir(tmp_path / "runs" / "broker-bounce")
    raw = results(tmp_path / "runs" / "baseline", name="baseline")
    raw["results"] = [variant_entry(tmp_path / "nowhere", "naive", faults=["crash at x"])]
    raw["passed"] = True
    raw["started_at"] = T0 + 100  # after the first (32 s) had ended: one at a time
    second = tmp_path / "runs" / "baseline"
    second.mkdir(parents=True)
    (second / "results.json").write_text(json.dumps(raw))
    broken = tmp_path / "runs" / "died"
    broken.mkdir()

    report = write_matrix_report(tmp_path / "matrix", [first, second, broken])
    text = report.markdown.read_text()
    assert text.startswith("# Scenario matrix: FAIL\n")
    assert "| scenario | wall | runtime | naive | idempotent |" in text
    assert (
        "| [broker-bounce](../runs/broker-bounce/report.md) | 32 s | listener | 5/1/1 **FAIL** "
        "| 0/0/0 pass |"
    ) in text
    assert "| [baseline](../runs/baseline/report.md) | 32 s | listener | 0/0/0 pass | - |" in text
    assert "| [died](../runs/died/report.md) | - | - | no results: " in text
    for part in report.scenarios:
        assert part.markdown.is_file() and part.junit.is_file()
    assert (first / "timeline.png").is_file() and (second / "timeline.png").is_file()

    root = ET.parse(report.junit).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["broker-bounce", "baseline", "died"]
    assert [len(s.findall("testcase")) for s in suites] == [2, 1, 1]
    assert [s.get("failures") for s in suites] == ["1", "0", "0"]
    assert suites[2].get("errors") == "1" and suites[2].find("testcase/error") is not None
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")

    table = render_matrix_table([load(first), load(second)]).splitlines()
    assert table[0] == "cells: duplicates/lost/stale expectation"
    assert table[1].split() == ["scenario", "wall", "runtime", "naive", "idempotent"]
    assert table[2].split() == [
        "broker-bounce", "32", "s", "listener", "5/1/1", "FAIL", "0/0/0", "pass"
    ]  # fmt: skip
    assert table[3].split() == ["baseline", "32", "s", "listener", "0/0/0", "pass", "-"]
    assert table[4] == "2 scenarios, 3 variant runs: 1 failed (broker-bounce listener/naive)"


def test_idle_is_no_batch_in_hand_not_a_slow_write() -> None:
    run = in_memory_run()
    slow = [
        ev(1.0, EventKind.BATCH, "listener-0", batch=1, count=10),
        ev(6.0, EventKind.WRITTEN, "listener-0", batch=1, count=10),  # a 5-s write: busy
        ev(6.5, EventKind.BATCH, "listener-0", batch=2, count=10),
        ev(6.6, EventKind.WRITTEN, "listener-0", batch=2, count=10),
        ev(7.0, EventKind.BATCH, "listener-1", batch=1, count=10),  # another consumer
        ev(12.0, EventKind.WRITTEN, "listener-1", batch=1, count=10),
        ev(16.0, EventKind.BATCH, "listener-0", batch=3, count=10),
    ]
    v = replace(run.variants[1], events=tuple(slow))
    assert idle_stretches(v, T0, 3.0) == [(12.0, 16.0)]


def test_pauses() -> None:
    events = [
        ev(2.0, EventKind.PAUSED, "listener-0", batch=3, detail="after_write_before_commit"),
        ev(9.0, EventKind.RESUMED, "harness", detail="listener-0 after 7s"),
        ev(11.0, EventKind.PAUSED, "listener-1", detail="before_write"),
    ]
    assert consumer_pauses(events, T0) == (
        Pause("listener-0", 2.0, 9.0, "after_write_before_commit"),
        Pause("listener-1", 11.0, None, "before_write"),
    )
    run = in_memory_run()
    v = replace(run.variants[1], events=tuple(consumer_events(False) + events))
    lines = what_happened(replace(run, variants=(v,)))
    assert (
        "listener/idempotent: listener-0 paused at after_write_before_commit from +2.0 s to "
        "+9.0 s (7.0 s)."
    ) in lines
    assert (
        "listener/idempotent: listener-1 paused at before_write from +11.0 s on, never resumed."
        in lines
    )


UNFIRED = {
    "name": "consumer-crash#1",
    "kind": "consumer-crash",
    "reason": "its point (after_write_before_commit of batch 2) was never reached: a consumer "
    "handled at most 1 batches",
}


def test_a_fault_that_did_not_fire_is_its_own_outcome_everywhere(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path / "run")
    raw = json.loads((run_dir / "results.json").read_text())
    raw["results"][1].update(
        expectation="unfired",
        reason=f"consumer-crash#1 never fired: {UNFIRED['reason']}",
        unfired=[UNFIRED],
    )
    raw["passed"] = False
    (run_dir / "results.json").write_text(json.dumps(raw))
    run = load(run_dir)
    idempotent = run.variants[1]
    assert idempotent.outcome.value == "unfired" and not idempotent.passed
    assert [u.name for u in idempotent.unfired] == ["consumer-crash#1"]

    table = render_table(run)
    assert "UNFIRED: consumer-crash#1 never fired: its point (after_write_before_commit" in table
    assert "(1 with faults that did not fire)" in table.splitlines()[0]
    assert "0/0/0 UNFIRED" in render_matrix_table([run])

    report = write_report(run_dir)
    (suite,) = ET.parse(report.junit).getroot().findall("testsuite")
    # The naive variant failed its expectations; the idempotent one could not be judged.
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "1")
    (error,) = suite.findall("testcase")[1].findall("error")
    assert error.get("type") == "fault-not-fired"
    assert "consumer-crash#1 never fired" in (error.text or "")
    text = report.markdown.read_text()
    assert "**UNFIRED**: consumer-crash#1 never fired" in text
    assert "listener/idempotent: consumer-crash#1 never fired: its point" in text
    assert "the counts say nothing about it" in text


def soak_run(seed: int, naive: dict[str, Any], guard: dict[str, Any]) -> ScenarioResult:
    raw = results(Path("/nowhere"), name="crash")
    raw["seed"] = seed
    detects = {"expectations": ["duplicates > 0"], "expectation": "pass", "failures": []}
    raw["results"] = [
        variant_entry(Path("/nowhere"), "naive", **(detects | naive)),
        variant_entry(Path("/nowhere"), "idempotent", **({"failures": []} | guard)),
    ]
    return ScenarioResult.from_json(raw)


def test_soak_counts_false_alarms_detections_and_why_a_run_did_not_hold() -> None:
    unfired = [{"name": "kill", "kind": "consumer-crash", "why": "no batch 9"}]
    runs = [
        soak_run(11, {"duplicates": 4}, {}),
        soak_run(12, {"failures": ["expected duplicates > 0, got 0"]}, {}),
        soak_run(13, {"duplicates": 2}, {"duplicates": 1, "failures": ["... got 1"]}),
        soak_run(14, {"unfired": unfired}, {"unfired": unfired}),
        replace(soak_run(15, {}, {}), variants=(), error="died"),
    ]
    cells = soak_cells(runs)
    assert [(c.variant, c.role, c.runs, c.held) for c in cells] == [
        ("naive", Role.DETECTS, 5, 2),
        ("idempotent", Role.GUARDS, 5, 2),
    ]
    naive, guard = cells
    assert (naive.failed, naive.unfired, naive.died, naive.anomalous) == ((12,), (14,), (15,), 2)
    assert (guard.failed, guard.unfired, guard.figure) == (
        (13,), (14,), "false alarms 1/5 (95%: 4-62%)"
    )  # fmt: skip
    table = render_soak_table(cells).splitlines()
    assert table[1].split() == [
        "scenario", "runtime", "variant", "expected", "figure", "anomalous", "not", "held"
    ]  # fmt: skip
    assert table[2].split()[2:] == [
        "naive", "anomalies", "detected", "2/5", "(95%:", "12-77%)", "2/5", "failed", "12;",
        "unfired", "14;",
        "died", "15",
    ]  # fmt: skip
    assert table[3].split()[2:] == [
        "idempotent", "exactly", "once", "false", "alarms", "1/5", "(95%:", "4-62%)", "1/5",
        "failed", "13;",
        "unfired", "14;", "died", "15",
    ]  # fmt: skip
    assert table[-1] == (
        "false alarms: 1 in 5 runs of variants expected to keep every change once; "
        "detected: 2 of 5 runs expected to show duplicates or losses"
    )


def test_the_soak_page_is_the_soak_table_with_what_it_was_measured_with() -> None:
    # make soak writes docs/soak.md with it: the same cells as the terminal's table.
    runs = [
        soak_run(11, {"duplicates": 4}, {}),
        soak_run(12, {"failures": ["expected duplicates > 0, got 0"]}, {}),
    ]
    page = soak_markdown(
        runs, wall_s=90.0, command="chaoslab matrix --repeat 2", revision="abc1234", cores=2
    ).splitlines()
    assert page[0] == "# Soak figures"
    assert "`chaoslab matrix --repeat 2`" in page[2]
    assert page[4] == (
        "* **false alarms: 0 in 2 runs of variants expected to keep every change once; "
        "detected: 1 of 2 runs expected to show duplicates or losses**."
    )
    assert "2 scenario runs in 1.5 min" in page[5] and "1 failed (crash listener/naive)" in page[5]
    assert "with chaoslab abc1234" in page[6] and "2 cores" in page[6]
    rows = [line for line in page if line.startswith("| crash")]
    assert rows == [
        "| crash | listener | naive | anomalies | detected 1/2 (95%: 9-91%) | 1/2 | failed 12 |",
        "| crash | listener | idempotent | exactly once | false alarms 0/2 (95%: 0-66%) | 0/2 "
        "| - |",
    ]


def test_an_expectation_over_seeds_is_judged_by_its_share_of_the_runs() -> None:
    rate = "duplicates > 0 in 80% of runs"

    def run(seed: int, held: bool) -> ScenarioResult:
        naive = {"expectations": [rate], "rates": [{"expectation": rate, "held": held}]}
        return soak_run(seed, naive, {})

    cells = soak_cells([run(s, held=s != 13) for s in range(10, 20)])
    naive = cells[0]
    assert naive.role is Role.DETECTS and naive.held == 10  # one run decides no rate
    (figure,) = naive.rates
    assert (figure.held, figure.runs, figure.passed) == (9, 10, True)
    assert naive.figure == "detected 9/10 (95%: 60-98%)"
    assert str(figure) == f"{rate}: 9/10 (95%: 60-98%), holds"
    # A lane with only expectations over seeds (a race's reproducer) held where they did.
    race = "lost == 0 in 100% of runs"

    def replay(seed: int, held: bool) -> ScenarioResult:
        return soak_run(seed, {"expectations": [race], "rates": [{"expectation": race,
                                                                   "held": held}]}, {})  # fmt: skip

    (other, _guard) = soak_cells([replay(10, held=False), replay(11, held=True)])
    assert other.role is Role.OTHER and other.held == 2
    assert other.figure.startswith("held 1/2")
    short = soak_cells([run(s, held=s < 17) for s in range(10, 20)])[0].rates[0]
    assert (short.held, short.passed) == (7, False)
    assert "crash listener/naive: " + str(short) in render_soak_table(soak_cells(
        [run(s, held=s < 17) for s in range(10, 20)]
    ))  # fmt: skip


def test_runs_that_were_under_way_at_once_are_marked_beside_each_other(tmp_path: Path) -> None:
    """``matrix --together``: the table says which wall times overlap, from the runs' own start
    and wall times; a run that started after the others ended has no mark."""
    runs = []
    for name, start in (("a", T0), ("b", T0 + 20), ("c", T0 + 60)):  # 32 s each: a and b overlap
        raw = results(tmp_path / name, name=name)
        raw["started_at"] = start
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "results.json").write_text(json.dumps(raw))
        runs.append(load(tmp_path / name))
    assert [r.name for r in beside(runs[0], runs)] == ["b"]
    assert [r.name for r in beside(runs[1], runs)] == ["a"]
    assert beside(runs[2], runs) == []
    table = render_matrix_table(runs).splitlines()
    walls = {line.split()[0]: line.split()[1:3] for line in table[2:5]}
    assert walls == {"a": ["32", "s*"], "b": ["32", "s*"], "c": ["32", "s"]}
    assert BESIDE_NOTE in table
    text = write_matrix_report(tmp_path / "matrix", [tmp_path / n for n in "abc"]).markdown
    assert r"\* ran beside other scenarios" in text.read_text()
    # Each scenario's own page names the runs beside it (written when the matrix ends).
    seed = runs[1].seed
    assert (
        f"- **Ran beside**: b (seed {seed}) (--together)" in (tmp_path / "a/report.md").read_text()
    )
    assert "Ran beside" not in (tmp_path / "c/report.md").read_text()
    assert "ran beside" not in render_matrix_table(runs[2:])  # alone: no note
    # One that started as the other ended, within the 0.01 s results.json keeps, is not beside
    # it (as the second of two runs one at a time does).
    first = replace(runs[2], seconds=12.59)  # 12.5862 s, as written
    after = replace(runs[2], started_at=first.started_at + 12.5863)
    assert beside(after, [first, after]) == [] and beside(first, [first, after]) == []


def test_a_soak_whose_every_run_died_says_so() -> None:
    assert render_soak_table([]) == "soak: no run left results"


def test_where_the_bad_records_went_is_in_the_dlq_cell_and_a_table_by_shape(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    raw = results(run_dir)
    good = "e-0017-3"
    record = BadRecord("b-1", "key-as-string", 0, 41, 17, 3)
    fates = [
        Fate(record, Outcome.MERGED, "d1", good, change=(17, 3)),
        Fate(BadRecord("b-2", "tombstone", 1, 7, 5, 0), Outcome.DROPPED),
        Fate(BadRecord("b-3", "malformed-json", 2, 9, 8, 0), Outcome.DEAD_LETTERED),
    ]
    skipped = GoodDeadLettered(108, "WriteSkippedException: ", (0, 42), (record,))
    raw["results"][1] |= {"followed": True, "bad": [f.to_dict() for f in fates],
                          "dead_lettered": 1, "lost": 1,
                          "dead_lettered_good": [skipped.to_dict()]}  # fmt: skip
    run = ScenarioResult.from_json(raw)
    idempotent = run.variants[1]
    assert idempotent.verdict.displaced == 1 and idempotent.verdict.bad_dropped == 1
    assert "1 (1 merged, 1 dropped, 108 good dead-lettered)" in render_table(run).splitlines()[3]
    text = write_report(make_run_dir(run_dir, raw=raw)).markdown.read_text()
    assert "| shape | listener/idempotent |" in text
    assert "| key-as-string | 1 merged |" in text and "| tombstone | 1 dropped |" in text
    assert (
        "**listener/idempotent: 1 good change(s) displaced by a bad record** (counted lost): "
        "key-as-string b-1 (partition 0, offset 41): merged into document d1, displacing "
        "change (17, 3) (e-0017-3)"
    ) in text
    assert (
        "**listener/idempotent: 108 good record(s) dead-lettered** (counted lost where stored "
        "nowhere else): 108 good records (WriteSkippedException: ), from partition 0 offset 42: "
        "skipped after the refused write of key-as-string b-1 (partition 0, offset 41)"
    ) in text


def test_the_matrix_line_counts_the_runs_that_broke_a_race_expectation() -> None:
    # A race's reproducer expects its promise as a rate: each of its runs passes on its own,
    # and the line under the table says which broke it (their verdict is given over the runs).
    run = in_memory_run()
    rate = "lost == 0 in 100% of runs"
    held, broke = (RateCheck(rate, True),), (RateCheck(rate, False),)
    runs = [
        replace(run, variants=tuple(replace(v, rates=r) for v in run.variants[:1]))
        for r in (held, broke, broke)
    ]
    last = render_matrix_table(runs).splitlines()[-1]
    assert last.endswith("; 2 broke an expectation judged over the runs")
    assert "judged over" not in render_matrix_table(runs[:1])
