"""Benchmark (not a test): a CDC source from PostgreSQL through Debezium, on one environment.

1. ``cdc-exactly-once-source`` over 3 seeds with Connect's exactly-once source support on (the
   library's file) and off (the same file without it), side by side: the change topic's copies
   and losses after the SIGKILL and the clean stop of Debezium's worker (Kafka's own
   ``test_exactly_once_source`` asserts none with it on), and naive's duplicates, which its own
   crash makes either way.
2. Changes a second from the database to the change topic: 5,000 changes written as fast as
   PostgreSQL takes them, no fault; the first commit to the last record on the topic.
3. Commit-to-MongoDB latency, p50 and p99: 1,500 changes at 100 a second, no fault; per
   change, its commit (PostgreSQL's log) to its document's write in the LSN-keyed upsert's sink.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_cdc.py
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from pymongo import MongoClient

from harness.environment.local import LocalEnvironment
from harness.kafka.clients import read_topic
from harness.paths import library
from harness.results.model import ScenarioResult
from harness.run.runner import run_scenario
from harness.scenario import Scenario, VariantSpec, load_scenario
from harness.workload.events import Kind
from harness.workload.ledger import read_ledger

SEEDS = (1, 2, 3)
EOS_WORKER, EOS_CONNECTOR = "exactly.once.source.support", "exactly.once.support"


def print_none(_line: str) -> None:
    return None


def without_eos(scenario: Scenario) -> Scenario:
    source = scenario.source
    config = {k: v for k, v in source.config.items() if k != EOS_CONNECTOR}
    connect = {k: v for k, v in source.connect.items() if k != EOS_WORKER}
    return replace(scenario, source=replace(source, config=config, connect=connect))


def quiet(scenario: Scenario, events: int, rate: float) -> Scenario:
    """The scenario without faults, ``events`` changes at ``rate`` a second (0: at once), the
    LSN-keyed upsert alone."""
    return replace(
        scenario,
        faults=(),
        rate=rate,
        workload=replace(scenario.workload, events=events),
        variants=(VariantSpec("idempotent", {}),),
        expect={},
    )


def copies(result: ScenarioResult) -> tuple[int, int, int]:
    """The topic's copies and losses (the source's stage), and naive's duplicates."""
    naive = next(v for v in result.variants if v.variant == "naive")
    assert naive.relay is not None
    return naive.relay.published.duplicates, naive.relay.published.lost, naive.verdict.duplicates


def commits(result: ScenarioResult) -> dict[str, float]:
    """Each committed change's commit time, by its event id (the run's ledger)."""
    ledger = result.variants[0].ledger
    assert ledger is not None
    return {r.event_id: r.acked_at for r in read_ledger(ledger) if r.kind is Kind.NORMAL}


def to_topic_rate(env: LocalEnvironment, result: ScenarioResult) -> float:
    committed = commits(result)
    topic = next(r.topic for r in read_ledger(result.variants[0].ledger or Path()))
    last = max(r.timestamp for r in read_topic(env.kafka_bootstrap, topic, contents=True))
    return len(committed) / (last - min(committed.values()))


def latencies(env: LocalEnvironment, result: ScenarioResult) -> np.ndarray:
    committed = commits(result)
    lane = result.variants[0]
    assert lane.directory is not None
    database = json.loads((lane.directory / "runtime.json").read_text())["database"]
    client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with client:
        found = client[database].events.find({}, {"event_id": 1, "_lab.written_at": 1})
        return np.array([d["_lab"]["written_at"] - committed[d["event_id"]] for d in found])


def main() -> None:
    library_file = next(p for p in library() if p.stem == "cdc-exactly-once-source")
    eos = load_scenario(library_file)
    with (
        tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp,
        LocalEnvironment(Path(tmp) / "env") as env,
    ):
        rows = []
        for seed in SEEDS:
            for label, scenario in (("on", eos), ("off", without_eos(eos))):
                print(f"cdc-exactly-once-source, seed {seed}, exactly-once {label} ...", flush=True)
                seeded = scenario.with_overrides(seed=seed)
                out = Path(tmp) / f"eos-{label}-{seed}"
                rows.append(
                    (seed, label, *copies(run_scenario(env, seeded, out, progress=print_none)))
                )
        speeds = {}
        for label, scenario in (("on", eos), ("off", without_eos(eos))):
            print(f"5,000 changes at once, then 1,500 at 100 a second, exactly-once {label} ...",
                  flush=True)  # fmt: skip
            fast = run_scenario(env, quiet(scenario, 5000, 0), Path(tmp) / f"fast-{label}",
                                progress=print_none)  # fmt: skip
            paced = run_scenario(env, quiet(scenario, 1500, 100), Path(tmp) / f"paced-{label}",
                                 progress=print_none)  # fmt: skip
            speeds[label] = (to_topic_rate(env, fast), latencies(env, paced))

    print("\ncdc-exactly-once-source: the change topic after Debezium's SIGKILL and clean stop")
    print(f"  {'seed':<6}{'exactly-once':<14}{'topic copies':>14}{'topic lost':>12}"
          f"{'naive duplicates':>18}")  # fmt: skip
    for seed, label, copied, lost, naive in rows:
        print(f"  {seed:<6}{label:<14}{copied:>14}{lost:>12}{naive:>18}")
    print(
        "\nfrom the database: changes/s to the change topic (5,000 changes written at once, first"
    )
    print("commit to last record); commit to MongoDB (1,500 changes at 100/s, per change, the")
    print("LSN-keyed upsert's write)")
    print(f"  {'exactly-once':<14}{'changes/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for label, (rate, waits) in speeds.items():
        p50, p99 = np.percentile(waits, [50, 99])
        print(f"  {label:<14}{rate:>10.0f}{p50 * 1000:>9.0f}{p99 * 1000:>9.0f}")


if __name__ == "__main__":
    main()
