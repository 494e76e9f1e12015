"""The "what happened" list: sentences generated from the measurements, nothing inferred.

Times are "+N s" since the run started. An anomaly is placed in the fault window it fell in;
a duplicate outside any window is related to the last consumer death before it was written
(the restarted consumer writing its uncommitted batch again is how crashes duplicate), with
the delay measured, not a cause claimed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from harness.history.events import EventKind
from harness.history.windows import FaultWindow
from harness.results.model import ScenarioResult, VariantResult
from harness.results.outcome import Outcome

from .timeline import Death, Mark, TimelineRow, origin, timeline

# Faults of one kind applied more often than this are summarised in one sentence.
MAX_LISTED = 6
# Deaths of one variant listed one by one up to this many.
MAX_DEATHS = 4

_NOUNS = {
    "duplicate": ("duplicates", "were written"),
    "lost": ("lost changes", "were acked"),
    "stale": ("stale orders", "were last acked"),
}


def at(t: float) -> str:
    return f"+{t:.1f} s" if t >= 0 else f"{t:.1f} s"


def during(times: Sequence[float]) -> str:
    lo, hi = min(times), max(times)
    return f"at {at(lo)}" if hi - lo < 0.05 else f"between {at(lo)} and {at(hi)}"


def what_happened(run: ScenarioResult) -> list[str]:
    rows = timeline(run).rows
    lines = fault_sentences(run, rows) + topic_sentences(run)
    for v, row in zip(run.variants, rows, strict=True):
        lines += variant_sentences(v, row)
    return lines


def topic_sentences(run: ScenarioResult) -> list[str]:
    """Records Kafka itself held more than once, once each however many histories hold them,
    and whose copies they made: the topic's, not in any variant's duplicates."""
    t0 = origin(run)
    stored = dict.fromkeys(
        (e.t, e.detail) for v in run.variants for e in v.events if e.kind is EventKind.STORED_TWICE
    )
    if not stored:
        return []
    copies = ", ".join(
        f"{v.label} {v.verdict.topic_duplicates}"
        for v in run.variants
        if v.verdict.topic_duplicates
    )
    lines = [
        f"The topic, not a consumer: Kafka held an acknowledged record more than once - {detail}, "
        f"acknowledged at {at(t - t0)} (a producer's retry stored again)."
        for t, detail in sorted(stored)
    ]
    lines.append(
        "Every consumer was handed those copies; "
        + (f"stored as the topic's copies, not in the duplicates: {copies}." if copies
           else "no sink kept a copy of them.")
    )  # fmt: skip
    return lines


def fault_sentences(run: ScenarioResult, rows: Sequence[TimelineRow]) -> list[str]:
    """The faults applied, once each however many variants' histories hold them."""
    where: dict[tuple[str, float], list[str]] = defaultdict(list)
    windows: dict[tuple[str, float], FaultWindow] = {}
    for row in rows:
        for w in row.windows:
            key = (w.name, round(w.start, 1))
            windows.setdefault(key, w)
            where[key].append(row.label)
    timed = {w.name for w in windows.values()}
    untimed = list(
        dict.fromkeys(
            f.name if f.name.startswith(f.kind) else f"{f.name} ({f.kind})"
            for v in run.variants
            for f in v.faults
            if f.name not in timed
        )
    )
    configured = (
        [f"Faults configured, with no time window recorded: {'; '.join(untimed)}."]
        if untimed
        else []
    )
    if not windows:
        return configured or ["No faults were applied."]

    bounces: dict[str, dict[tuple[int, str], tuple[float, str]]] = defaultdict(dict)
    for row in rows:
        for step in row.steps:
            bounces[step.fault].setdefault((step.number, step.what), (step.t, step.what))
    everywhere = {row.label for row in rows}
    by_kind: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for key, w in windows.items():
        by_kind[w.kind].append(key)
    lines = []
    for kind, keys in by_kind.items():
        if len(keys) > MAX_LISTED:
            starts = [windows[k].start for k in keys]
            lines.append(
                f"Fault {kind} applied {len(keys)} times, {during(starts)} "
                f"(first {windows[keys[0]].name}, last {windows[keys[-1]].name})."
            )
            continue
        for key in keys:
            w = windows[key]
            labels = where[key]
            on = ""
            if len(everywhere) > 1:
                on = (
                    " on every variant" if set(labels) == everywhere else f" on {', '.join(labels)}"
                )
            steps = sorted(bounces.get(w.name, {}).values())
            down = [(t, what) for t, what in steps if " SIG" in what or not what]
            went = "; went down: " + ", ".join(
                f"{what.split(' SIG')[0] or 'a node'} at {at(t)}" for t, what in down
            )
            went = went if down else ""
            also = "".join(f"; {what} at {at(t)}" for t, what in steps if (t, what) not in down)
            lines.append(f"Fault {_describe(w)}{on}{went}{also}.")
    return lines + configured


def _describe(w: FaultWindow) -> str:
    name = w.name if w.name.startswith(w.kind) else f"{w.name} ({w.kind})"
    if w.open_ended:
        return f"{name} from {at(w.start)}, never ended (until {at(w.end)}, the variant's end)"
    if w.instant:
        return f"{name} at {at(w.start)}"
    return f"{name} from {at(w.start)} to {at(w.end)} ({w.end - w.start:.1f} s)"


def variant_sentences(v: VariantResult, row: TimelineRow) -> list[str]:
    label = row.label
    lines = death_sentences(row)
    for p in row.pauses:
        until = (
            f"to {at(p.end)} ({p.end - p.start:.1f} s)"
            if p.end is not None
            else "on, never resumed"
        )
        lines.append(f"{label}: {p.consumer} paused at {p.point} from {at(p.start)} {until}.")
    for start, end in row.idle:
        lines.append(
            f"{label}: no batch in hand from {at(start)} to {at(end)} ({end - start:.1f} s)."
        )
    if row.broker_errors:
        counts = Counter(e.error.split()[0] for e in row.broker_errors)
        which = ", ".join(f"{n} {error}" for error, n in counts.most_common())
        first, last = row.broker_errors[0].t, row.broker_errors[-1].t
        lines.append(
            f"{label}: the brokers answered its consumers' group requests with "
            f"{len(row.broker_errors)} coordinator errors ({which}), from {at(first)} to "
            f"{at(last)}."
        )
    if row.injected:
        counts = Counter(e.error.split()[0] for e in row.injected)
        which = ", ".join(f"{n} {kind}" for kind, n in counts.most_common())
        lines.append(
            f"{label}: {len(row.injected)} errors its consumers reported were the lab's, not a "
            f"server's - answers a fault made up in a server's place (emulated: {which}), from "
            f"{at(row.injected[0].t)} to {at(row.injected[-1].t)}."
        )
    if row.mongo_errors:
        counts = Counter(e.error.split(":")[0] for e in row.mongo_errors)
        which = ", ".join(f"{n} {command}" for command, n in counts.most_common())
        lines.append(
            f"{label}: {len(row.mongo_errors)} of its MongoDB commands failed as the driver saw "
            f"them ({which}), from {at(row.mongo_errors[0].t)} to "
            f"{at(row.mongo_errors[-1].t)}; first: {row.mongo_errors[0].error}."
        )
    if row.retried:
        lines.append(
            f"{label}: the MongoDB driver retried {len(row.retried)} operations whose command "
            "had failed, and each retry was answered (a retryable write or commit goes again "
            "with its session and transaction number: a server that had applied it answers "
            "from that record instead of applying it twice), from "
            f"{at(row.retried[0])} to {at(row.retried[-1])}."
        )
    if row.task_failures:
        aborted = sum("manual data clean up" in e.error for e in row.task_failures)
        lines.append(
            f"{label}: Spark's driver lost {len(row.task_failures)} of its write tasks, from "
            f"{at(row.task_failures[0].t)} to {at(row.task_failures[-1].t)}"
            + (
                f" ({aborted} aborted by MongoDB's connector: what they wrote stays)"
                if aborted
                else ""
            )
            + f"; first: {row.task_failures[0].error}."
        )
    if row.query_failures:
        failed = row.query_failures[0]
        lines.append(
            f"{label}: its Spark query stopped with an error {len(row.query_failures)} time(s), "
            f"first at {at(failed.t)} ({failed.error}); each time it was started again from its "
            "checkpoint, which replays the batch it had not committed."
        )
    if row.went_back:
        orders = len({e.error.split()[1] for e in row.went_back})
        lines.append(
            f"{label}: its rows went back {len(row.went_back)} times ({orders} orders), from "
            f"{at(row.went_back[0].t)} to {at(row.went_back[-1].t)}: an older change applied "
            f"over a newer one, a replay's, as the lab's watch of its collection saw it (first: "
            f"{row.went_back[0].error}); what it held at the end is counted below."
        )
    holds = [e for e in row.held if ": " in e.error]  # "... at record N: why"; else goes on
    if holds:
        goes_on = [e.t for e in row.held if ": " not in e.error]
        lines.append(
            f"{label}: the lab held the workload's last records back {len(holds)} time(s), "
            f"first from {at(holds[0].t)}"
            + (f" to {at(goes_on[0])}" if goes_on else "")
            + f" ({holds[0].error.split(': ', 1)[1]}): its doing, not the systems', so that "
            "the stream was still under way when that fault came."
        )
    if row.stopped is not None:
        lines.append(
            f"{label}: stopped for good at {at(row.stopped.t)} - {row.stopped.error}; the run "
            "went on without it, and what it had not stored is counted lost."
        )
    anomalies = [s for kind in _NOUNS for s in anomaly_sentences(row, kind)]
    if anomalies:
        lines += anomalies
    else:
        lines.append(f"{label}: no duplicates, lost changes or stale orders.")
    d = v.verdict
    if d.phantoms:
        lines.append(
            f"{label}: {d.phantoms} changes in the sink that no acked record explains "
            "(phantoms: a defect of the lab, not of the variant)."
        )
    if d.offsets_consistent is False:
        lines.append(f"{label}: the offsets stored in MongoDB differ from the last acked ones.")
    for u in v.unfired:
        lines.append(f"{label}: {u} - the counts say nothing about it.")
    if v.outcome is Outcome.FAIL:
        lines.append(f"{label}: expectation failed: {v.reason}.")
    return lines


def death_sentences(row: TimelineRow) -> list[str]:
    label = row.label
    if len(row.deaths) > MAX_DEATHS:
        hows = Counter(d.how for d in row.deaths)
        listed = ", ".join(f"{how} x{n}" for how, n in hows.most_common())
        return [
            f"{label}: {len(row.deaths)} consumer deaths {during([d.t for d in row.deaths])} "
            f"({listed}); {len(row.restarts)} restarts."
        ]
    lines = []
    for d in row.deaths:
        what = f"{d.consumer} crashed at {d.how}" if d.planned else f"{d.consumer} {d.how}"
        if d.batch is not None:
            what += f" (batch {d.batch})"
        line = f"{label}: {what} at {at(d.t)}"
        restart = next((r for r in row.restarts if r.consumer == d.consumer and r.t >= d.t), None)
        if restart is not None:
            line += f"; restarted at {at(restart.t)}"
            if restart.next_batch is not None:
                line += f", its next batch at {at(restart.next_batch)}"
        else:
            line += "; not restarted"
        lines.append(line + ".")
    for d in row.losses:
        batch = f" (batch {d.batch})" if d.batch is not None else ""
        lines.append(
            f"{label}: a Spark executor was lost at {at(d.t)}{batch} - {d.how}; the driver "
            "lived on and ran the task again on another executor."
        )
    return lines


def _death(d: Death) -> str:
    if d.planned:
        batch = f", batch {d.batch}" if d.batch is not None else ""
        return f"the crash of {d.consumer} at {at(d.t)} ({d.how}{batch})"
    return f"the death of {d.consumer} at {at(d.t)} ({d.how})"


def replay_causes(row: TimelineRow) -> list[tuple[float, str]]:
    """What hands records out again, in time order: a consumer's death, a lost Spark executor
    (its task runs again), a failed Spark query (started again, it replays its batch)."""
    found = [(d.t, _death(d)) for d in row.deaths]
    found += [(d.t, f"the loss of an executor at {at(d.t)} (batch {d.batch})") for d in row.losses]
    found += [(e.t, f"the failure of its Spark query at {at(e.t)}") for e in row.query_failures]
    return sorted(found)


def _own_replay(row: TimelineRow, window: str, first: float) -> str:
    """``, 0.4 s after the crash of listener-0 ...``: the lane's own replay cause, when one came
    inside the window before its first copy - a copy there is not the fault's alone (a
    consumer crash point in a scenario whose source's worker was bounced meanwhile)."""
    span = next((w for w in row.windows if w.name == window), None)
    if span is None:
        return ""
    cause = next((c for c in reversed(replay_causes(row)) if span.start <= c[0] <= first), None)
    return f", {first - cause[0]:.1f} s after {cause[1]}" if cause else ""


def anomaly_sentences(row: TimelineRow, kind: str) -> list[str]:
    """Where the anomalies of one kind fell: fault windows, after which crash, or neither."""
    total = row.counts.get(kind, 0)
    if not total:
        return []
    noun, verb = _NOUNS[kind]
    label = row.label
    marks = [m for m in row.anomalies if m.kind == kind]
    if not marks:
        return [f"{label}: {total} {noun}; results.json records no times for them."]

    lines = []
    in_window: dict[str, list[Mark]] = defaultdict(list)
    rest: list[Mark] = []
    for m in marks:
        (in_window[m.window] if m.window else rest).append(m)
    for window, ms in in_window.items():
        times = [m.t for m in ms]
        lines.append(
            f"{label}: {len(ms)} of {total} {noun} {verb} inside fault window {window}, "
            f"{during(times)}{_own_replay(row, window, min(times)) if kind == 'duplicate' else ''}."
        )
    if kind == "duplicate":
        causes = replay_causes(row)
        after: dict[tuple[float, str] | None, list[Mark]] = defaultdict(list)
        for m in rest:
            after[next((c for c in reversed(causes) if c[0] <= m.t), None)].append(m)
        for cause, ms in after.items():
            times = [m.t for m in ms]
            if cause is None:
                ended = [w for w in row.windows if w.end <= min(times)]
                if ended:  # outside its window: e.g. a message retaken after its claim expired
                    last = max(ended, key=lambda w: w.end)
                    lines.append(
                        f"{label}: {len(ms)} of {total} {noun} {verb} {during(times)}, outside any "
                        f"fault window, {min(times) - last.end:.1f} s after {last.name} ended."
                    )
                else:
                    before = " or consumer death" if causes else ""
                    lines.append(
                        f"{label}: {len(ms)} of {total} {noun} {verb} {during(times)}, with no "
                        f"fault window{before} before them."
                    )
            else:
                lines.append(
                    f"{label}: {len(ms)} of {total} {noun} {verb} within "
                    f"{max(times) - cause[0]:.1f} s after {cause[1]}, {during(times)}."
                )
    elif rest:
        outside = ", outside any fault window" if row.windows else ""
        lines.append(
            f"{label}: {len(rest)} of {total} {noun} {verb} {during([m.t for m in rest])}{outside}."
        )
    if len(marks) < total:
        lines.append(f"{label}: results.json gives times for {len(marks)} of the {total} {noun}.")
    return lines
