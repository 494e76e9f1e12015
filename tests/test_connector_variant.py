"""MongoDB's Spark connector as a variant, without servers: its write options taken by the
connector's own names and refused in its own words, the labels, where the checker reads, and
each configuration's promise. That the connector itself refuses the same values is checked
against the connector in tests/test_spark_connector.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.checker.promise import AT_LEAST_ONCE, AT_MOST_ONCE, EXACTLY_ONCE, NOTHING
from harness.errors import BadInput
from harness.pipeline.runtimes import LISTENER, SPARK
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.base import Landing
from harness.pipeline.variants.connector import ConnectorVariant
from harness.scenario import ScenarioError, parse_scenario
from tests.support import chaoslab


def connector(name: str = "connector-batch", /, **options: object) -> ConnectorVariant:
    made = make_variant(name, options)
    assert isinstance(made, ConnectorVariant)
    return made


def test_the_defaults_are_the_connectors_and_the_label_shows_what_was_set() -> None:
    default = connector("connector-sink")
    assert default.label == "connector-sink"
    assert default.options == {}
    assert (default.option("operationType"), default.option("idFieldList")) == ("replace", "_id")
    keyed = connector(idFieldList="event_id", ordered=False, maxBatchSize=100)
    assert keyed.options == {"idFieldList": "event_id", "ordered": "false", "maxBatchSize": "100"}
    assert keyed.label == "connector-batch[idFieldList=event_id,ordered=false,maxBatchSize=100]"
    # A list reads as the connector reads a comma-separated one; its commas are not the label's.
    business = connector(idFieldList=["order_id", "version"])
    assert business.options == {"idFieldList": "order_id,version"}
    assert business.label == "connector-batch[idFieldList=order_id+version]"
    insert = connector(operationType="insert", _id="event_id")
    assert insert.label == "connector-batch[operationType=insert,_id=event_id]"


def test_a_deployments_spark_configuration_pastes_in_but_for_its_address() -> None:
    pasted = connector(
        **{
            "spark.mongodb.write.connection.uri": "mongodb://prod-rs0:27017/",
            "spark.mongodb.write.database": "staging",
            "spark.mongodb.write.collection": "orders_cdc",
            "spark.mongodb.write.operationType": "Replace",  # the connector ignores the case
            "spark.mongodb.write.idFieldList": "event_id",
            "spark.mongodb.write.writeConcern.w": "majority",
        }
    )
    # The lane writes to its own database through the fault proxy; where the checker reads is
    # the collection the deployment names.
    assert pasted.options == {
        "operationType": "Replace",
        "idFieldList": "event_id",
        "writeConcern.w": "majority",
    }
    assert pasted.landing() == Landing("orders_cdc", event_id="event_id", current="")
    assert "collection=orders_cdc" in pasted.label


def test_an_unknown_option_and_refused_values_are_all_named_at_once() -> None:
    with pytest.raises(BadInput) as refused:
        connector(
            idFeildList="event_id",
            operationType="upsert",
            maxBatchSize="abc",
            ordered="yes",
            **{"writeConcern.journal": "maybe", "writeConcern.wTimeoutMS": -1},
            _id="order_id",
        )
    message = str(refused.value)
    assert message.startswith("variant connector-batch: ")
    assert "idFeildList: not a write option of MongoDB's Spark connector" in message
    assert "which would ignore it silently" in message
    # The connector's own words (10.5.0's WriteConfig and MongoConfig).
    assert "operationType: 'upsert' is not a valid Write Operation Type" in message
    assert "maxBatchSize: maxBatchSize did not contain a valid int, got: abc" in message
    assert "ordered: yes is not a boolean string." in message
    assert "Invalid write concern configuration. (maybe is not a boolean string.)" in message
    assert "Invalid write concern configuration. (wTimeout >= 0)" in message
    assert "_id: what the row's _id is" in message


def test_values_the_connector_takes_are_taken() -> None:
    # A tag set's name for w, a count of nodes; maxBatchSize 0 (every row its own bulk write).
    for w in ("majority", "dc-east", 2):
        assert connector(**{"writeConcern.w": w}).options["writeConcern.w"] == str(w)
    assert connector(maxBatchSize=0).options == {"maxBatchSize": "0"}
    assert connector(convertJson="objectOrArrayOnly", comment="chaoslab").options
    with pytest.raises(BadInput, match=r"state should be: w >= 0"):
        connector(**{"writeConcern.w": -1})


@pytest.mark.parametrize(
    ("options", "promise"),
    [
        # Every row lacks _id: an insert whatever operationType says - a replay adds copies.
        ({}, AT_LEAST_ONCE),
        ({"operationType": "update"}, AT_LEAST_ONCE),
        # Keyed by the producer's event id: no copy, none lost (but an upstream resend).
        ({"idFieldList": "event_id"}, EXACTLY_ONCE.without_resends()),
        ({"_id": "event_id"}, EXACTLY_ONCE.without_resends()),
        # Keyed by the business change: resends too.
        ({"idFieldList": "order_id,version"}, EXACTLY_ONCE),
        # A unique _id refuses a replayed row (E11000): no copy, and the write fails.
        ({"operationType": "insert", "_id": "event_id"}, AT_MOST_ONCE.without_resends()),
        # A change whose document is not there yet is never written.
        ({"idFieldList": "event_id", "upsertDocument": False}, NOTHING),
        # Replaced by order: an order's later change overwrites the earlier one's document.
        ({"idFieldList": "order_id"}, NOTHING),
    ],
)
def test_each_configuration_promises_what_its_writes_can_keep(
    options: dict[str, object], promise: object
) -> None:
    assert connector(**options).promise == promise


def test_it_runs_on_spark_only_and_the_connector_writes() -> None:
    variant = connector("connector-sink")
    assert variant.runs_on(SPARK) and not variant.runs_on(LISTENER)
    assert variant.landing() == Landing("events", event_id="event_id", current="")


def _scenario(variants: list[object]) -> dict[str, object]:
    return {
        "name": "connector",
        "description": "not from a seed; what to see: nothing",
        "workload": {"events": 100},
        "runtimes": ["spark"],
        "variants": variants,
    }


def test_a_scenario_names_the_lane_and_the_option() -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(_scenario(["connector-sink", {"name": "connector-batch", "ordred": True}]))
    assert "variants[1]" in str(refused.value)
    assert "ordred: not a write option of MongoDB's Spark connector" in str(refused.value)


def test_the_cli_refuses_a_bad_option_with_exit_2_before_anything_starts(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    bad = {"name": "connector-batch", "operationType": "upsert", "maxBatchSize": "many"}
    scenario.write_text(yaml.safe_dump(_scenario([bad])))
    done = chaoslab("run", str(scenario), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'upsert' is not a valid Write Operation Type" in done.stderr
    assert "maxBatchSize did not contain a valid int, got: many" in done.stderr
    assert "starting" not in done.stdout and not (tmp_path / "run").exists()


def test_an_upserts_fields_get_a_unique_index_as_a_team_would_make_it() -> None:
    assert connector(idFieldList="event_id").index_fields() == ("event_id",)
    assert connector(idFieldList=["order_id", "version"]).index_fields() == ("order_id", "version")
    # The defaults and an insert filter by nothing; _id has its own index.
    assert connector().index_fields() == ()
    assert connector(operationType="insert", idFieldList="event_id").index_fields() == ()
    assert connector(_id="event_id").index_fields() == ()
    # Left out on request, and said so in the label.
    bare = connector(idFieldList="event_id", unique_index=False)
    assert bare.index_fields() == () and bare.label.endswith(",unique_index=false]")
    with pytest.raises(BadInput, match="unique_index: true or false, got 'no'"):
        connector(unique_index="no")
