"""A run ends with the brokers its faults restarted back (``Nemesis.settle``): explore's runs,
a matrix's and a repeat's follow one another on one environment, and a run that began while a
killed broker was still starting had its topic refused (INVALID_REPLICATION_FACTOR)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.environment.local import LocalEnvironment
from harness.faults.kinds import parse_fault
from harness.history.events import EventKind, read_history
from harness.kafka.topics import create_topic
from tests.support import nemesis_of


@pytest.mark.servers
def test_a_broker_killed_in_the_run_is_back_before_the_run_ends(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    topic = f"settle.{time.time_ns()}"
    create_topic(lab_env.kafka_bootstrap, topic, 1)
    # Down for a minute: the run ends while it is down, and restore starts it without waiting.
    fault = parse_fault(
        {"kind": "broker-kill", "at": 0, "duration": 60, "broker": {"leader-of": 0}}, "kill"
    )
    nemesis, history = nemesis_of(lab_env, fault, tmp_path, topic)
    started = time.monotonic()
    try:
        while not any(e.kind is EventKind.FAULT_STEP for e in read_history(tmp_path)):
            assert time.monotonic() - started < 60, "the kill never came"
            nemesis.tick(time.monotonic() - started, 0)
            time.sleep(0.05)
    finally:
        nemesis.restore()
    (step,) = [e for e in read_history(tmp_path) if e.kind is EventKind.FAULT_STEP]
    node = int(step.detail.split()[1])  # "node 2 SIGKILL"
    assert not lab_env.broker_ready(node)  # started again a moment ago: not back yet
    assert nemesis.settle() == []
    assert lab_env.broker_ready(node)
    assert len(lab_env.cluster_view().brokers) == len(lab_env.broker_ids)
    history.close()
