"""The outbox workload, relays and stages (seed 003) without servers: the same seed gives the same
writes, each relay finds the entries its shape handling finds, a scenario is refused whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.environment.local import LocalEnvironment
from harness.errors import BadInput
from harness.outbox.relays import make_relay
from harness.outbox.workload import OutboxSpec, WriteOp, generate_writes
from harness.run.runner import run_scenario
from harness.scenario import ScenarioError, parse_scenario
from harness.workload.events import Kind
from harness.workload.ledger import Change, placed

PUSH = {
    "operationType": "update",
    "documentKey": {"_id": 7},
    "updateDescription": {
        "updatedFields": {"status": "paid", "outbox.2": {"_id": "a", "targetTopic": "orders"}},
        "removedFields": [],
    },
}
SET = {
    "operationType": "update",
    "documentKey": {"_id": 7},
    "updateDescription": {"updatedFields": {"outbox": [{"_id": "b", "targetTopic": "billing"}]}},
}


def test_the_same_seed_gives_the_same_writes_and_every_order_starts_with_an_insert() -> None:
    spec = OutboxSpec(writes=200, documents=30)
    first, again = list(generate_writes(spec, 5)), list(generate_writes(spec, 5))
    assert first == again and first != list(generate_writes(spec, 6))
    seen: set[int] = set()
    for write in first:
        assert (write.op is WriteOp.INSERT) == (write.order_id not in seen)
        seen.add(write.order_id)
    assert {w.op for w in first} == set(WriteOp)


def test_seed_003_relays_set_but_not_push_and_the_others_relay_both() -> None:
    assert [m.entry_id for m in make_relay("seed-003").messages(SET)] == ["b"]
    assert make_relay("seed-003").messages(PUSH) == []
    for name in ("naive", "idempotent", "transactional"):
        messages = make_relay(name).messages(PUSH)
        assert [(m.entry_id, m.topic, m.key) for m in messages] == [("a", "orders", b"7")], name


def test_an_unknown_relay_is_named() -> None:
    with pytest.raises(BadInput, match="unknown relay 'kafka-connect'"):
        make_relay("kafka-connect")


def test_relays_and_relay_crashes_need_an_outbox_and_bad_fields_are_all_named() -> None:
    raw = {
        "name": "x",
        "variants": ["naive"],
        "relays": ["naive", "nope"],
        "outbox": {"writes": 0, "mix": {"pull": 1}},
    }
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(raw)
    text = str(caught.value)
    assert "unknown relay 'nope'" in text
    assert "outbox.writes: must be >= 1" in text and "outbox.mix.pull: unknown shape" in text
    with pytest.raises(ScenarioError, match="add an outbox: section"):
        parse_scenario({"name": "x", "variants": ["naive"], "relays": ["naive"]})
    with pytest.raises(ScenarioError, match="use kind relay-crash"):
        parse_scenario(
            {
                "name": "x",
                "variants": ["naive"],
                "faults": [{"kind": "consumer-crash", "point": "after_publish_before_token"}],
            }
        )


@pytest.mark.servers
def test_a_users_own_relay_runs_as_a_relay_process_and_its_losses_are_counted(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    """``module:callable`` in ``relays:``: the relay process imports it from where this process
    found it, and the stages count what it does - here, the entries after each change's first."""
    scenario = parse_scenario({
        "name": "user-relay", "seed": 3, "outbox": {"writes": 60, "documents": 20},
        "relays": ["tests.custom_relay:FirstEntryRelay", "naive"], "variants": ["idempotent"],
        "faults": [{"kind": "relay-crash", "at_change": 20}],
    })  # fmt: skip
    run = run_scenario(scenario_env, scenario, tmp_path, progress=print)
    results = {r.variant: r for r in run.variants}
    mine, naive = results["first-entry"], results["naive"]
    assert mine.crashes == naive.crashes == 1
    assert mine.relay is not None and naive.relay is not None
    # What the workload wrote beyond each change's first entry, and nothing else, never left.
    assert scenario.outbox is not None
    extra = sum(len(w.entries) - 1 for w in generate_writes(scenario.outbox, 3))
    assert mine.relay.published.lost == extra > 0
    assert naive.relay.published.lost == 0


RELAY_SOURCE: dict[str, Any] = {
    "name": "x",
    "variants": ["naive", "connect-default"],
    "source": {"kind": "outbox", "relay": "transactional"},
    "outbox": {"writes": 10, "topics": ["orders"]},
    "faults": [{"kind": "relay-crash", "at_change": 3}],
}


def test_with_an_outbox_relay_as_the_source_the_variants_are_the_lanes() -> None:
    scenario = parse_scenario(RELAY_SOURCE)
    assert scenario.source.outbox and [r.label for r in scenario.relays] == ["transactional"]
    assert [(rt, spec.label) for rt, spec in scenario.lanes] == [
        ("listener", "naive"), ("connect", "connect-default"),
    ]  # fmt: skip
    assert scenario.setting.relays == {"transactional"}  # its relay-crash has a relay to kill


def test_an_outbox_source_names_every_problem_of_its_relay_outbox_and_topics() -> None:
    two_topics = {**RELAY_SOURCE, "relays": ["naive"], "outbox": {"topics": ["a", "b"]},
                  "source": {"kind": "outbox", "relay": "nope", "existing": 5}}  # fmt: skip
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(two_topics)
    said = str(caught.value)
    for problem in (
        "relays: relays: puts relays side by side",
        "outbox.topics: with source: outbox the relay's one target topic",
        "source.relay: unknown relay 'nope'",
        "source.existing: an outbox source has no existing",
    ):
        assert problem in said, said
    without = {k: v for k, v in RELAY_SOURCE.items() if k != "outbox"}
    with pytest.raises(ScenarioError, match="an outbox source relays the scenario's outbox"):
        parse_scenario({**without, "source": {"kind": "outbox"}})
    with pytest.raises(ScenarioError, match="an outbox source needs its relay"):
        parse_scenario({**RELAY_SOURCE, "source": {"kind": "outbox"}})
    with pytest.raises(ScenarioError, match="a producer source has no relay"):
        parse_scenario({"name": "x", "variants": ["naive"],
                        "source": {"kind": "producer", "relay": "naive"}})  # fmt: skip


def test_the_sinks_ledger_places_each_entry_at_its_first_record_and_lists_the_copies() -> None:
    expected = [Change("a", 1, 1, at=10.0), Change("b", 1, 2, at=11.0), Change("c", 2, 1, at=12.0)]
    on_topic = [
        Change("a", 1, 1, at=20.0, partition=0, offset=0),
        Change("b", 1, 2, at=21.0, partition=0, offset=1),
        Change("a", 1, 1, at=22.0, partition=0, offset=2),  # the relay's copy, after a kill
        Change("z", 9, 9, at=23.0, partition=1, offset=0),  # of no entry written: a phantom's
    ]
    rows = placed(expected, on_topic, "t")
    assert [(r.event_id, r.kind, r.partition, r.offset, r.acked_at) for r in rows] == [
        ("a", Kind.NORMAL, 0, 0, 10.0),
        ("b", Kind.NORMAL, 0, 1, 11.0),
        ("c", Kind.NORMAL, -1, -1, 12.0),  # never on the topic: lost at publish
        ("a", Kind.COPY, 0, 2, 22.0),
    ]
    assert [r.seq for r in rows] == [0, 1, 2, 3] and {r.topic for r in rows} == {"t"}
