"""Benchmark (not a test): the checker on a million-row ledger and a million-document sink.

    .venv/bin/python tests/benchmarks/bench_checker.py [ROWS]

Writes a ledger CSV (the format LedgerWriter writes, without its per-row flush), loads it with
load_ledger, builds a sink with known losses, duplicates, stale orders and missing
poison, checks it, and prints the times and memory. Goal: load + check in a few seconds.
"""

from __future__ import annotations

import multiprocessing
import pickle
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from harness.checker.check import check
from harness.checker.load import load_ledger
from harness.checker.model import KIND_CODES, LedgerArrays, SinkSnapshot
from harness.history.windows import FaultWindow
from harness.workload.events import Kind
from harness.workload.ledger import COLUMNS

T0 = 1_767_225_600.0
PARTITIONS = 6
ORDERS = 100_000


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cumcount(groups: np.ndarray) -> np.ndarray:
    """Per element, how many earlier elements share its group (0, 1, 2, ... in order)."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_groups[1:] != sorted_groups[:-1])))
    run_start = np.repeat(starts, np.diff(np.append(starts, len(groups))))
    counts = np.empty(len(groups), dtype=np.int64)
    counts[order] = np.arange(len(groups)) - run_start
    return counts


def write_ledger(path: Path, rows: int, rng: np.random.Generator) -> None:
    """`rows` acked rows: ~1% poison, ~5% resends of one of the last 200 changes, the rest new
    changes (each order's versions 1, 2, 3, ...); the format LedgerWriter writes, built with
    numpy and written by pyarrow (a Python loop is far too slow at these sizes)."""
    roll = rng.random(rows)
    orders = rng.integers(1, ORDERS + 1, rows)
    kind = np.where(roll < 0.01, 2, np.where(roll < 0.06, 1, 0))  # poison, resend, normal
    normal = np.flatnonzero(kind == 0)
    version = np.zeros(rows, dtype=np.int64)
    version[normal] = cumcount(orders[normal]) + 1
    resend = np.flatnonzero(kind == 1)
    # A resend repeats one of the (up to) 200 latest changes before it (the first, if none).
    latest = np.searchsorted(normal, resend) - 1 - rng.integers(0, 200, len(resend))
    source = normal[np.clip(latest, 0, None)]
    orders[resend], version[resend] = orders[source], version[source]
    kind_names = np.array([Kind.NORMAL.value, Kind.RESEND.value, Kind.POISON.value])
    partition = orders % PARTITIONS
    seq = np.arange(rows)
    table = pa.table(
        {
            "seq": seq,
            "event_id": pc.binary_join_element_wise(
                "e-", pc.utf8_lpad(pa.array(seq).cast(pa.string()), 16, "0"), ""
            ),
            "order_id": orders,
            "version": version,
            "kind": pa.array(kind_names[kind]),
            "topic": pa.array(np.full(rows, "orders")),
            "partition": partition,
            "offset": cumcount(partition),
            "acked_at": T0 + seq * 1e-3 + rng.random(rows) * 1e-4,
        }
    )
    assert tuple(table.column_names) == COLUMNS
    pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="none"))


def build_sink(
    ledger: LedgerArrays, rng: np.random.Generator
) -> tuple[SinkSnapshot, dict[str, int]]:
    """Each acked change once, except: 1% lost, 3% twice, 0.5% three times; 0.2% of orders
    stale; 10% of poison not dead-lettered (and each dead-lettered one twice). Returns the
    sink and the counts it was built to have."""
    changes = ledger.kind != KIND_CODES[Kind.POISON]
    keys = np.unique(ledger.order_id[changes] * 2**24 + ledger.version[changes])
    roll = rng.random(len(keys))
    copies = np.where(roll < 0.01, 0, np.where(roll < 0.04, 2, np.where(roll < 0.045, 3, 1)))
    written = np.repeat(keys, copies)
    written_at = T0 + rng.random(len(written)) * 1000
    order_id, version = written >> 24, written & (2**24 - 1)

    top_key = np.maximum.reduceat(keys, np.flatnonzero(np.diff(keys >> 24, prepend=-1)))
    proj_order, proj_version = top_key >> 24, top_key & (2**24 - 1)
    behind = rng.random(len(proj_version)) < 0.002
    proj_version = np.where(behind, proj_version - 1, proj_version)

    poison = ~changes & (rng.random(len(ledger)) < 0.9)
    dlq_partition = np.tile(ledger.partition[poison], 2)
    dlq_offset = np.tile(ledger.offset[poison], 2)
    stored = {p: int(ledger.offset[ledger.partition == p].max()) for p in range(PARTITIONS)}
    sink = SinkSnapshot(
        changes_order_id=order_id,
        changes_version=version,
        changes_written_at=written_at,
        projection_order_id=proj_order,
        projection_version=proj_version,
        dead_lettered_partition=dlq_partition,
        dead_lettered_offset=dlq_offset,
        stored_offsets=stored,
    )
    built = {
        "lost": int((copies == 0).sum()),
        "duplicates": int((copies - 1).clip(0).sum()),
        "stale": int(behind.sum()),
        "poison_missing": int((~changes).sum() - poison.sum()),
    }
    return sink, built


def prepare(path: Path, rows: int) -> None:
    """The ledger at ``path`` and, beside it, the sink built to match it (pickled)."""
    write_ledger(path, rows, np.random.default_rng(7))
    sink, built = build_sink(load_ledger(path), np.random.default_rng(8))
    with path.with_suffix(".sink").open("wb") as f:
        pickle.dump((sink, built), f, protocol=5)


def main(rows: int) -> None:
    with tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp:
        path = Path(tmp) / "ledger.csv"
        start = time.perf_counter()
        # In a process of its own: building the ledger and the sink must not count in this
        # one's peak RSS, which is the checker's: the sink's arrays, the ledger, the check.
        builder = multiprocessing.get_context("spawn").Process(target=prepare, args=(path, rows))
        builder.start()
        builder.join()
        if builder.exitcode != 0:
            raise SystemExit(f"building the ledger failed (exit code {builder.exitcode})")
        wrote = time.perf_counter() - start
        size_mb = path.stat().st_size / 2**20
        print(f"ledger: {rows:,} rows, {size_mb:.0f} MiB, and its sink built in {wrote:.1f} s")
        with path.with_suffix(".sink").open("rb") as f:
            sink, built = pickle.load(f)

        import harness.checker.load  # noqa: F401 - import time (pyarrow) is not load time

        rss = max_rss_mb()
        start = time.perf_counter()
        ledger = load_ledger(path)
        load_s = time.perf_counter() - start
        load_rss = max_rss_mb() - rss
    print(f"load (load_ledger): {load_s:.2f} s, peak RSS +{load_rss:.0f} MiB")
    print(f"sink: {len(sink.changes_order_id):,} changes, {len(sink.projection_order_id):,} orders")
    windows = [FaultWindow(f"fault-{i}", T0 + 100 * i, T0 + 100 * i + 30) for i in range(10)]

    rss = max_rss_mb()
    start = time.perf_counter()
    verdict = check(ledger, sink, produced=rows, windows=windows)
    check_s = time.perf_counter() - start
    check_rss = max_rss_mb() - rss
    again = []
    for _ in range(3):
        start = time.perf_counter()
        check(ledger, sink, produced=rows, windows=windows)
        again.append(time.perf_counter() - start)
    tracemalloc.start()
    check(ledger, sink, produced=rows, windows=windows)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"check: {check_s:.2f} s (warm: best of 3 {min(again):.2f} s), "
        f"peak RSS +{check_rss:.0f} MiB, peak numpy/python allocations {peak / 2**20:.0f} MiB"
    )
    print(f"total load + check: {load_s + check_s:.2f} s; process peak RSS {max_rss_mb():.0f} MiB")
    summary = {k: v for k, v in verdict.to_dict().items() if k != "anomalies"}
    print(f"verdict: {summary}")
    agree = all(summary[k] == n for k, n in built.items())
    print(f"built to have {built}: {'agrees' if agree else 'DISAGREES'}")
    print(f"anomalies listed: {len(verdict.anomalies)} of {verdict.anomalies_total}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
