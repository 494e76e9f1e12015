"""The report's PNG plots: anomalies per variant, the timeline, throughput over time.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot), so writing a report never
changes the backend or global state of a notebook or program that imports the harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from harness.history.windows import FaultWindow
from harness.results.model import ScenarioResult

from .table import relayed
from .timeline import (
    KINDS,
    Series,
    TimelineRow,
    acked_per_second,
    clusters,
    committed_per_second,
    origin,
    timeline,
    written_per_second,
)

ANOMALIES_PNG = "anomalies.png"
TIMELINE_PNG = "timeline.png"
THROUGHPUT_PNG = "throughput.png"

DPI = 110
COLORS = {"duplicate": "#E69F00", "lost": "#C62828", "stale": "#6A3D9A"}
NAMES = {"duplicate": "duplicates", "lost": "lost", "stale": "stale"}
FAIL_COLOR = "#C62828"
BROKER_ERROR_COLOR = "#6A1B9A"
COMMIT_FAILED_COLOR = "0.25"
LOGGED_COLOR = "#8D6E63"  # a command consumer's own error line: its words, not a broker's
# An error the lab made a server answer with: hollow, so it never reads as a broker's own.
INJECTED_COLOR = "#E65100"
HISTORY_LOST_COLOR = "#C44E52"  # a relay's lost resume point: a loss, in the losses' red family
MONGO_ERROR_COLOR = "#00838F"  # a MongoDB server's own error, as the driver saw it
RETRIED_COLOR = "#2E7D32"  # the driver's retry, answered
QUERY_FAILED_COLOR = "#8B0000"  # a Spark query stopped by an error; its end for good
CONNECTOR_STATE_COLOR = "#37474F"  # Connect's own word on a connector or task
WINDOW_COLORS = ("#4C72B0", "#55A868", "#8172B2", "#CCB974", "#64B5CD", "#DD8452")
# Each anomaly kind has its own lane in a variant's row: a burst of duplicates stays visible
# next to a loss at the same moment.
LANE = {"duplicate": 0.25, "lost": 0.0, "stale": -0.25}
MAX_WINDOW_LABELS = 12
WINDOW_LABEL_LINES = 3  # faults often start together (a restart and its commit failures)
PAUSE_COLOR = "#1565C0"
STEP_COLOR, STEP_STYLE = "0.3", (0, (4, 2))
STEP_HANDLE = Line2D(
    [], [], color=STEP_COLOR, lw=1.4, ls=STEP_STYLE, label="fault step (a bounce, a cut)"
)
RESTART_COLOR = "#2E7D32"
EXECUTOR_LOST_COLOR = "#EF6C00"
EXECUTOR_LOST_LABEL = "Spark executor lost (its task retried)"
MAX_CLUSTER_LABELS = 6  # per row and kind: the largest bursts


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def plot_anomalies(run: ScenarioResult, path: Path) -> Path:
    """Grouped bars: duplicates, lost, stale for each runtime/variant, pass/FAIL under it."""
    n = len(run.variants)
    fig = _figure(max(7.0, 1.5 * n + 2.5), 5.0)
    ax = fig.add_subplot()
    ax.set_title(f"{run.name}: duplicates, lost and stale per variant")
    if not n:
        _empty(ax, "no variant results")
        return _save(fig, path)
    x = np.arange(n)
    width = 0.26
    values = {
        "duplicate": [v.verdict.duplicates for v in run.variants],
        "lost": [v.verdict.lost for v in run.variants],
        # A relay's sink stores messages, not an order's state: no bar (report.table)
        "stale": [0 if relayed(v) else v.verdict.stale for v in run.variants],
    }
    for i, kind in enumerate(KINDS):
        bars = ax.bar(
            x + (i - 1) * width, values[kind], width, label=NAMES[kind], color=COLORS[kind]
        )
        ax.bar_label(bars, fmt="%d", padding=2, fontsize=8)
    labels = [f"{v.label}\n{v.outcome.word}" for v in run.variants]
    ax.set_xticks(x, labels, fontsize=9)
    for tick, v in zip(ax.get_xticklabels(), run.variants, strict=True):
        if not v.passed:
            tick.set_color(FAIL_COLOR)
            tick.set_fontweight("bold")
    top = max(max(vals) for vals in values.values())
    ax.set_ylim(0, max(1, top) * 1.15)
    if top == 0:
        _empty(ax, "no duplicates, lost changes or stale orders in any variant")
        ax.set_yticks([0, 1])
    ax.set_ylabel("count (extra copies, changes, orders)")
    ax.set_xlabel("runtime/variant and its expectation")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper right")
    return _save(fig, path)


def plot_timeline(run: ScenarioResult, path: Path) -> Path:
    """One row per runtime/variant, one panel per side-by-side group, in run order."""
    groups = timeline(run).groups()
    heights = [len(rows) for _, rows in groups] or [1]
    fig = _figure(12.0, 1.9 + 0.85 * sum(heights) + 0.35 * len(heights))
    fig.suptitle(f"{run.name}: when each anomaly, fault and consumer crash happened")
    if not groups:
        _empty(fig.add_subplot(), "no variant results")
        return _save(fig, path)
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=heights)[:, 0]
    colors = window_colors([row for _, group in groups for row in group])
    for ax, (_, rows) in zip(axes, groups, strict=True):
        _timeline_panel(ax, rows, colors)
        if len(groups) > 1:
            # Above the fault windows' names, which sit on the panel's top edge.
            ax.set_title(
                f"side by side: {', '.join(r.label for r in rows)}",
                fontsize=9,
                pad=5 + 11 * WINDOW_LABEL_LINES,
            )
    axes[-1].set_xlabel("seconds since the run started")
    rows = [row for _, group in groups for row in group]
    fig.legend(handles=_timeline_legend(rows), loc="outside lower center", ncols=4, fontsize=9)
    return _save(fig, path)


def _timeline_panel(ax: Axes, rows: Sequence[TimelineRow], colors: dict[str, str]) -> None:
    n = len(rows)
    labelled: dict[tuple[str, float], FaultWindow] = {}
    times: list[float] = []
    marks: list[tuple[float, str, list[float]]] = []
    for i, row in enumerate(rows):
        y = n - 1 - i  # first variant on top
        if row.span:
            ax.hlines(y, *row.span, color="0.85", lw=10, zorder=1)
            times += list(row.span)
        for start, end in row.idle:
            ax.hlines(y, start, end, color="white", lw=4, linestyles=(0, (2, 2)), zorder=1.5)
        for p in row.pauses:
            end = p.end if p.end is not None else (row.span[1] if row.span else p.start)
            ax.hlines(y, p.start, end, color=PAUSE_COLOR, lw=4, zorder=1.6)
        for w in row.windows:
            color = colors[w.kind]
            if w.instant:
                ax.vlines(w.start, y - 0.5, y + 0.5, color=color, lw=2.5, alpha=0.8, zorder=2)
            else:
                ax.fill_betweenx(
                    [y - 0.5, y + 0.5], w.start, w.end, color=color, alpha=0.22, lw=0, zorder=0
                )
            labelled.setdefault((w.name, round(w.start, 1)), w)
            times += [w.start, w.end]
        _draw_steps(ax, row, colors, y - 0.5, y + 0.5)
        # What the clients and servers said, and what the lab did in their place, as marks.
        said: list[tuple[list[float], float, dict[str, Any]]] = [
            ([e.t for e in row.broker_errors], -0.3,
             {"marker": "v", "s": 18, "color": BROKER_ERROR_COLOR, "lw": 0, "alpha": 0.7}),
            (list(row.commit_failures), 0.38,
             {"marker": "x", "s": 14, "color": COMMIT_FAILED_COLOR, "lw": 0.9, "alpha": 0.7}),
            ([e.t for e in row.injected], -0.3,
             {"marker": "v", "s": 20, "facecolors": "none", "edgecolors": INJECTED_COLOR,
              "lw": 0.8, "alpha": 0.8}),
            ([e.t for e in row.mongo_errors], -0.3,
             {"marker": "v", "s": 18, "color": MONGO_ERROR_COLOR, "lw": 0, "alpha": 0.7}),
            (list(row.retried), -0.38,
             {"marker": "P", "s": 22, "color": RETRIED_COLOR, "lw": 0, "alpha": 0.8}),
            ([line.t for line in row.logged], -0.3,
             {"marker": "*", "s": 26, "color": LOGGED_COLOR, "lw": 0, "alpha": 0.7}),
            ([e.t for e in row.query_failures], 0.3,
             {"marker": "X", "s": 34, "color": QUERY_FAILED_COLOR, "lw": 0, "alpha": 0.85}),
            ([e.t for e in row.task_failures], 0.3,
             {"marker": "x", "s": 16, "color": QUERY_FAILED_COLOR, "lw": 0.9, "alpha": 0.7}),
            ([e.t for e in row.connector_states], 0.38,
             {"marker": "D", "s": 12, "color": CONNECTOR_STATE_COLOR, "lw": 0, "alpha": 0.8}),
        ]  # fmt: skip
        if row.stopped is not None and row.span is not None:
            ax.hlines(y, row.stopped.t, row.span[1], color=QUERY_FAILED_COLOR, lw=2.5,
                      linestyles=(0, (1, 1)), zorder=1.7)  # fmt: skip
            times.append(row.stopped.t)
        for ts, dy, style in said:
            if ts:
                ax.scatter(ts, [y + dy] * len(ts), zorder=3, **style)
                times += ts
        if row.history_lost:
            ts = list(row.history_lost)
            ax.scatter(ts, [y] * len(ts), marker="D", s=46, color=HISTORY_LOST_COLOR,
                       edgecolors="white", lw=0.8, zorder=5)  # fmt: skip
            times += ts
        for kind in KINDS:
            ts = row.times(kind)
            if ts:
                ax.scatter(
                    ts,
                    [y + LANE[kind]] * len(ts),
                    marker="|",
                    s=140,
                    lw=1.6,
                    color=COLORS[kind],
                    alpha=0.8,
                    zorder=3,
                )
                times += ts
                marks.append((y + LANE[kind], kind, ts))
        for d in row.losses:
            ax.scatter(
                d.t, y, marker="X", s=130, color=EXECUTOR_LOST_COLOR, edgecolor="white", lw=0.8,
                zorder=5,
            )  # fmt: skip
            ax.annotate(d.how, (d.t, y), xytext=(6, 8), textcoords="offset points", fontsize=7,
                        color="0.2")  # fmt: skip
        for d in row.deaths:
            ax.scatter(
                d.t, y, marker="X", s=130, color="black", edgecolor="white", lw=0.8, zorder=5
            )
            ax.annotate(
                d.how if d.planned else d.how.split(" by ")[0],
                (d.t, y),
                xytext=(6, -12),
                textcoords="offset points",
                fontsize=7,
                color="0.2",
            )
            times.append(d.t)
        for r in row.restarts:
            ax.scatter(
                r.t, y, marker="^", s=70, color=RESTART_COLOR, edgecolor="white", lw=0.6, zorder=4
            )
            times.append(r.t)
    ax.set_yticks(range(n), [_row_label(r) for r in reversed(rows)], fontsize=9)
    ax.set_ylim(-0.5, n - 0.5)
    lo, hi = (min(times), max(times)) if times else (0.0, 1.0)
    pad = max(0.5, 0.03 * (hi - lo))
    ax.set_xlim(lo - pad, hi + pad)
    for lane, kind, ts in marks:
        # Copies written in one batch fall on one instant: say how many each tick stands for.
        # Ticks closer than a label's width count as one burst, or the label would cover them.
        label_width = _text_width(ax, hi - lo + 2 * pad, f"0000 {NAMES[kind]}", 8)
        bursts = [c for c in clusters(ts, gap=max(0.2, label_width)) if c[2] > 1]
        biggest = sorted(bursts, key=lambda c: -c[2])[:MAX_CLUSTER_LABELS]
        texts = [(last, f"{count} {NAMES[kind]}") for _, last, count in sorted(biggest)]
        for x, text, _ in _place(ax, hi - lo + 2 * pad, texts, 8):
            ax.annotate(
                text,
                (x, lane),
                xytext=(5, 0),
                textcoords="offset points",
                fontsize=8,
                color=COLORS[kind],
                va="center",
                fontweight="bold",
            )
    if len(labelled) <= MAX_WINDOW_LABELS:
        windows = sorted(labelled.values(), key=lambda w: w.start)
        names = {w.name: w for w in windows}
        labels = [(w.start, w.name) for w in windows]
        for x, name, level in _place(ax, hi - lo + 2 * pad, labels, 8, levels=WINDOW_LABEL_LINES):
            ax.annotate(
                name,
                (x, n - 0.5),
                xytext=(2, 3 + 11 * level),
                textcoords="offset points",
                fontsize=8,
                color=colors[names[name].kind],
                va="bottom",
                annotation_clip=False,
            )
    for y in range(n - 1):
        ax.axhline(y + 0.5, color="0.9", lw=0.8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)


def _place(
    ax: Axes, x_range: float, labels: Sequence[tuple[float, str]], size: float, levels: int = 1
) -> list[tuple[float, str, int]]:
    """Labels (x, text) placed left to right on the lowest of ``levels`` lines where they do
    not run into the label before them; those that fit on no line are left out. Text widths
    are estimated from the font size and the axes' width."""
    free_from = [float("-inf")] * levels
    placed = []
    for x, text in sorted(labels):
        level = next((i for i in range(levels) if x >= free_from[i]), None)
        if level is not None:
            placed.append((x, text, level))
            free_from[level] = x + _text_width(ax, x_range, text, size)
    return placed


def _text_width(ax: Axes, x_range: float, text: str, size: float) -> float:
    """About how wide ``text`` is in data units, with a little margin."""
    assert isinstance(ax.figure, Figure)  # the module draws on top-level figures only
    width_px = ax.figure.get_figwidth() * DPI * ax.get_position().width
    return (len(text) * 0.62 * size * DPI / 72 + 8) * x_range / max(width_px, 1.0)


def _row_label(row: TimelineRow) -> str:
    c = row.counts
    label = f"{row.label}\n{c['duplicate']} dup · {c['lost']} lost · {c['stale']} stale"
    total = c["duplicate"] + c["lost"] + c["stale"]
    if len(row.anomalies) < total:  # the checker keeps the earliest of each kind only
        label += f"\n(earliest {len(row.anomalies)} drawn)"
    return label


def _timeline_legend(rows: Sequence[TimelineRow]) -> list[Line2D | Patch]:
    def mark(marker: str, color: str, label: str, size: float = 9) -> Line2D:
        width = 1.5 if marker == "|" else 0.5
        return Line2D(
            [],
            [],
            ls="",
            marker=marker,
            color=color,
            markersize=size,
            label=label,
            markeredgewidth=width,
        )

    # Every kind of anomaly is always listed: "no red ticks" must read as "nothing lost".
    handles: list[Line2D | Patch] = [
        mark("|", COLORS["duplicate"], "duplicate copy (when written)"),
        mark("|", COLORS["lost"], "lost change (when acked)"),
        mark("|", COLORS["stale"], "stale order (last acked)"),
        Patch(color="0.85", label="variant running"),
    ]
    optional: list[tuple[bool, Line2D | Patch]] = [
        (
            any(r.idle for r in rows),
            Line2D([], [], color="0.7", lw=4, ls=(0, (2, 2)), label="no batch in hand (>= 3 s)"),
        ),
        (any(r.pauses for r in rows), Line2D([], [], color=PAUSE_COLOR, lw=4, label="paused")),
        (any(r.deaths for r in rows), mark("X", "black", "consumer crash")),
        (any(r.losses for r in rows), mark("X", EXECUTOR_LOST_COLOR, EXECUTOR_LOST_LABEL)),
        (
            any(r.steps for r in rows),
            STEP_HANDLE,
        ),
        (any(r.restarts for r in rows), mark("^", RESTART_COLOR, "consumer restart")),
        (
            any(r.broker_errors for r in rows),
            mark("v", BROKER_ERROR_COLOR, "coordinator error from a broker", 6),
        ),
        (
            any(r.injected for r in rows),
            Line2D(
                [],
                [],
                ls="",
                marker="v",
                markersize=6,
                markerfacecolor="none",
                markeredgecolor=INJECTED_COLOR,
                label="an error the lab injected (emulated)",
            ),
        ),
        (
            any(r.mongo_errors for r in rows),
            mark("v", MONGO_ERROR_COLOR, "an error from MongoDB (as the driver saw it)", 6),
        ),
        (
            any(r.retried for r in rows),
            mark("P", RETRIED_COLOR, "the driver retried a write: answered", 6),
        ),
        (
            any(r.commit_failures for r in rows),
            mark("x", COMMIT_FAILED_COLOR, "offset commit failed (the consumer's answer)", 6),
        ),
        (
            any(r.logged for r in rows),
            mark("*", LOGGED_COLOR, "an error line the consumer logged (read by the lab)", 8),
        ),
        (
            any(r.query_failures for r in rows),
            mark("X", QUERY_FAILED_COLOR, "the Spark query stopped with an error", 7),
        ),
        (
            any(r.task_failures for r in rows),
            mark("x", QUERY_FAILED_COLOR, "a write task Spark lost (its driver's log)", 6),
        ),
        (
            any(r.connector_states for r in rows),
            mark("D", CONNECTOR_STATE_COLOR, "a Connect task's state (its REST API)", 5),
        ),
        (
            any(r.stopped for r in rows),
            Line2D(
                [],
                [],
                color=QUERY_FAILED_COLOR,
                lw=2.5,
                ls=(0, (1, 1)),
                label="the pipeline stopped for good",
            ),
        ),
        (
            any(r.history_lost for r in rows),
            mark("D", HISTORY_LOST_COLOR, "resume point gone from the oplog (286)", 7),
        ),
        (
            any(r.windows for r in rows),
            Patch(color=WINDOW_COLORS[0], alpha=0.3, label="fault window (named above)"),
        ),
    ]
    return handles + [handle for shown, handle in optional if shown]


def plot_throughput(run: ScenarioResult, path: Path) -> Path:
    """One strip per runtime/variant: records written per second (1-s buckets), on one scale
    so variants compare; above them a strip of the broker's acks. Crashes and fault windows
    are marked on every strip."""
    t0 = origin(run)
    rows = timeline(run).rows
    written = [written_per_second(v, t0) for v in run.variants]
    committed = [committed_per_second(v, t0) for v in run.variants]
    acked = acked_per_second(run)
    strips = len(written) + (1 if acked else 0)
    fig = _figure(12.0, 1.5 + 0.95 * max(strips, 1))
    fig.suptitle(f"{run.name}: records written per second per variant (1-s buckets)")
    if not any(len(s.t) for s in written):
        _empty(fig.add_subplot(), "no WRITTEN events in the histories")
        return _save(fig, path)
    axes = list(fig.subplots(strips, 1, sharex=True, squeeze=False)[:, 0])
    colors = window_colors(rows)
    if acked:
        ax = axes.pop(0)
        for s in acked:
            _filled_step(ax, s, "0.45")
        ax.set_ylabel("acked by\nthe broker", rotation=0, ha="right", va="center", fontsize=9)
        _strip(ax)
        _shade(ax, _distinct_windows(rows), colors)
        labelled = ax
    else:
        labelled = axes[0]
    top = max((float(s.rate.max()) for s in written if len(s.t)), default=1.0)
    strips_of = zip(axes, written, committed, rows, run.variants, strict=True)
    for i, (ax, s, c, row, v) in enumerate(strips_of):
        color = f"C{i % 10}"
        if len(s.t):
            _filled_step(ax, s, color)
        else:
            _empty(ax, "no batch written")
        if len(c.t):  # a command consumer's group, as the lab polled it
            ax.step(c.t, c.rate, where="post", color="black", lw=0.9, ls="--")
        ax.set_ylim(0, top * 1.2)
        ax.set_ylabel(
            f"{v.label}\n{v.events_per_s:.0f} ev/s overall",
            rotation=0,
            ha="right",
            va="center",
            fontsize=9,
        )
        _strip(ax)
        _shade(ax, row.windows, colors)
        _draw_steps(ax, row, colors)
        for d in row.losses:
            ax.axvline(d.t, color=EXECUTOR_LOST_COLOR, lw=1, ls=":")
        for d in row.deaths:
            ax.axvline(d.t, color="black", lw=1, ls=":")
            ax.scatter(
                d.t,
                top * 1.05,
                marker="X",
                s=70,
                color="black",
                edgecolor="white",
                lw=0.6,
                zorder=5,
                clip_on=False,
            )
    axes[-1].set_xlabel("seconds since the run started")
    # Labels last: their spacing depends on the final x range, known once every strip is drawn.
    _label_windows(labelled, _distinct_windows(rows), colors)
    handles: list[Line2D | Patch] = []
    if any(r.deaths for r in rows):
        handles.append(
            Line2D(
                [],
                [],
                ls=":",
                color="black",
                marker="X",
                markersize=8,
                markeredgecolor="white",
                label="consumer crash",
            )
        )
    if any(r.losses for r in rows):
        handles.append(Line2D([], [], ls=":", color=EXECUTOR_LOST_COLOR, label=EXECUTOR_LOST_LABEL))
    if any(r.steps for r in rows):
        handles.append(STEP_HANDLE)
    if any(r.windows for r in rows):
        handles.append(Patch(color=WINDOW_COLORS[0], alpha=0.3, label="fault window"))
    if any(len(c.t) for c in committed):
        handles.append(
            Line2D([], [], color="black", lw=0.9, ls="--", label="committed/s (polled by the lab)")
        )
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9)
    return _save(fig, path)


def _strip(ax: Axes) -> None:
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(3, integer=True))
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)


def _filled_step(ax: Axes, s: Series, color: str) -> None:
    # Each bucket is drawn over its whole second: the last one needs its right edge too.
    t = np.append(s.t, s.t[-1] + s.bucket)
    r = np.append(s.rate, s.rate[-1])
    ax.fill_between(t, r, step="post", color=color, alpha=0.35, lw=0)
    ax.step(t, r, where="post", color=color, lw=1.2)


def _distinct_windows(rows: Sequence[TimelineRow]) -> list[FaultWindow]:
    seen: dict[tuple[str, float], FaultWindow] = {}
    for row in rows:
        for w in row.windows:
            seen.setdefault((w.name, round(w.start, 1)), w)
    return sorted(seen.values(), key=lambda w: w.start)


def window_colors(rows: Sequence[TimelineRow]) -> dict[str, str]:
    """One color per fault kind, the same in every plot of the run."""
    kinds = dict.fromkeys(w.kind for w in _distinct_windows(rows))
    return {kind: WINDOW_COLORS[i % len(WINDOW_COLORS)] for i, kind in enumerate(kinds)}


def _draw_steps(
    ax: Axes, row: TimelineRow, colors: dict[str, str], y0: float | None = None, y1: float = 0
) -> None:
    """Each broker bounce inside a (rolling) restart window, as a dashed line in its color
    (over the row from ``y0`` to ``y1``, or the whole height)."""
    kinds = {w.name: w.kind for w in row.windows}
    for s in row.steps:
        color = colors.get(kinds.get(s.fault, ""), STEP_COLOR)
        if y0 is None:
            ax.axvline(s.t, color=color, lw=1.4, ls=STEP_STYLE, zorder=2)
        else:
            ax.vlines(s.t, y0, y1, color=color, lw=1.4, linestyles=STEP_STYLE, zorder=2)


def _shade(ax: Axes, windows: Sequence[FaultWindow], colors: dict[str, str]) -> None:
    for w in windows:
        if w.instant:
            ax.axvline(w.start, color=colors[w.kind], lw=2, alpha=0.7)
        else:
            ax.axvspan(w.start, w.end, color=colors[w.kind], alpha=0.2, lw=0)


def _label_windows(ax: Axes, windows: Sequence[FaultWindow], colors: dict[str, str]) -> None:
    if len(windows) > MAX_WINDOW_LABELS:
        return
    lo, hi = ax.get_xlim()
    kinds = {w.name: w.kind for w in windows}
    labels = [(w.start, w.name) for w in windows]
    for x, name, level in _place(ax, hi - lo, labels, 8, levels=WINDOW_LABEL_LINES):
        ax.annotate(
            name,
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 3 + 11 * level),
            textcoords="offset points",
            fontsize=8,
            color=colors[kinds[name]],
            annotation_clip=False,
        )


def write_plots(run: ScenarioResult, directory: Path) -> tuple[Path, ...]:
    return (
        plot_anomalies(run, directory / ANOMALIES_PNG),
        plot_timeline(run, directory / TIMELINE_PNG),
        plot_throughput(run, directory / THROUGHPUT_PNG),
    )
