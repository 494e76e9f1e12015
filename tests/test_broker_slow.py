"""The ``broker-slow`` fault family: one Kafka node answers late, the others do not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from harness.environment.base import BackendAbilities, Link
from harness.environment.local import LocalEnvironment
from harness.faults.base import END, START, Setting
from harness.faults.families.broker import Do
from harness.faults.families.broker_slow import OFF, ON, BrokerSlow
from harness.faults.kinds import example, parse_fault
from harness.faults.schedule import plan
from harness.history.events import EventKind, read_history
from harness.history.windows import fault_windows
from harness.kafka.clients import producer_config
from harness.kafka.topics import create_topic
from harness.run.runner import run_scenario
from harness.scenario import ScenarioError, parse_scenario, runnable
from tests.support import leader_in_view, nemesis_of

LOCAL = BackendAbilities("local", nodes=(1, 2, 3), link_faults=True)
NO_PROXY = BackendAbilities("bare", nodes=(1, 2, 3), link_faults=False)
SETTING = Setting(
    events=100,
    batch_size=10,
    consumers=1,
    partitions=3,
    variants=frozenset({"naive"}),
)


def test_it_is_found_by_kind_and_parsed_with_every_problem_named() -> None:
    fault = parse_fault({**example("broker-slow", at=2), "name": "slow"}, "x")
    assert isinstance(fault, BrokerSlow)
    assert (fault.delay_ms, str(fault.broker), fault.links) == (
        500,
        "the leader of partition 0",
        (Link.CONSUMER_KAFKA, Link.PRODUCER_KAFKA),
    )
    with pytest.raises(ValueError) as caught:
        parse_fault(
            {
                "kind": "broker-slow",
                "at": 1,
                "duration": 0,
                "delay_ms": -5,
                "links": ["consumer-mongo"],
            },
            "x",
        )
    text = str(caught.value)
    for problem in (
        "duration: must be > 0",
        "delay_ms: must be > 0",
        "links: consumer-mongo is not a Kafka link",
    ):
        assert problem in text
    with pytest.raises(ValueError, match="broker: expected a node id, 'controller'"):
        parse_fault({"kind": "broker-slow", "at": 1, "duration": 2, "broker": "primary"}, "x")


def test_its_window_is_the_delay_and_its_node_must_exist() -> None:
    fault = parse_fault({"kind": "broker-slow", "at": 2, "duration": 3, "broker": 4}, "slow")
    (planned,) = plan((fault,), seed=1)
    assert [(s.action, s.at, s.after) for s in planned.steps] == [
        (START, 2, 0),
        (Do.AWAIT_TARGET, None, 0),  # the node named by the cluster (a leader moves)
        (ON, None, 0),
        (OFF, None, 3),
        (END, None, 0),
    ]
    assert fault.refusals(SETTING, LOCAL) == [
        ("broker", "the local backend's Kafka nodes are 1, 2, 3; there is no node 4")
    ]
    assert ("", "the bare backend has no link proxies") in fault.refusals(SETTING, NO_PROXY)
    scenario = parse_scenario(
        {
            "name": "s",
            "variants": ["naive"],
            "faults": [{"kind": "broker-slow", "at": 1, "duration": 2, "broker": {"leader-of": 5}}],
        }
    )
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.broker: leader-of: the topic has 3"):
        runnable(scenario, LOCAL)


def produce_seconds(producer: Producer, topic: str) -> float:
    acked: list[float] = []
    started = time.monotonic()
    producer.produce(
        topic, b"x", partition=0, on_delivery=lambda e, _m: acked.append(time.monotonic())
    )
    assert producer.flush(30) == 0
    return acked[0] - started


@pytest.mark.servers
def test_the_leader_answers_late_while_it_lasts(lab_env: LocalEnvironment, tmp_path: Path) -> None:
    topic = f"slow.{time.time_ns()}"
    create_topic(lab_env.kafka_bootstrap, topic, 1)
    leader = leader_in_view(lab_env, topic)
    producer = Producer(producer_config(lab_env.kafka_bootstrap_for(Link.PRODUCER_KAFKA)))
    produce_seconds(producer, topic)  # connected, metadata known
    fault = parse_fault(
        {
            "kind": "broker-slow",
            "at": 0,
            "duration": 60,
            "delay_ms": 300,
            "broker": {"leader-of": 0},
        },
        "slow",
    )
    # The fault acts on the servers only: no consumers are needed.
    nemesis, history = nemesis_of(lab_env, fault, tmp_path, topic)
    try:
        nemesis.tick(0.0, 0)  # start, then the delay on the leader's links
        assert produce_seconds(producer, topic) >= 2 * 0.300  # the request, then the answer
    finally:
        nemesis.restore()
    history.close()
    events = read_history(tmp_path)
    (step,) = [e for e in events if e.kind is EventKind.FAULT_STEP]
    assert step.detail == f"node {leader} +300 ms"
    assert [(w.name, w.open_ended) for w in fault_windows(events)] == [("slow", False)]
    assert lab_env.fault_proxy.rules() == []  # restore lifted both links' rules


@pytest.mark.servers
def test_a_slow_leader_costs_time_not_records(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    scenario = parse_scenario(
        {
            "name": "slow",
            "seed": 3,
            "variants": ["naive", "idempotent"],
            "workload": {"events": 1200, "keys": 100, "partitions": 3, "rate": 400},
            "pipeline": {"batch_size": 100},
            "faults": [
                {
                    "kind": "broker-slow",
                    "name": "slow",
                    "at": 0.5,
                    "duration": 2,
                    "delay_ms": 200,
                    "broker": {"leader-of": 0},
                }
            ],
            "expect": {"*": {"duplicates": 0, "lost": 0}},
        }
    )
    result = run_scenario(scenario_env, scenario, tmp_path / "run", progress=lambda _m: None)
    for variant in result.variants:
        assert variant.passed, variant.failures
        assert variant.unfired == ()
        assert variant.directory is not None
        windows = fault_windows(read_history(variant.directory / "history"))
        assert [(w.name, w.kind) for w in windows] == [("slow", "broker-slow")]
