"""The outbox workload, relays and stages (seed 003) without servers: the same seed gives the same
writes, each relay finds the entries its shape handling finds, a scenario is refused whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.environment.local import LocalEnvironment
from harness.errors import BadInput
from harness.outbox.relays import make_relay
from harness.outbox.workload import OutboxSpec, WriteOp, generate_writes
from harness.run.runner import run_scenario
from harness.scenario import ScenarioError, parse_scenario

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
