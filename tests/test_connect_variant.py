"""Kafka Connect lanes' pure parts: a connector config as a variant (built-in or pasted), the
scenario's cluster settings, the workers' log lines a lane records, and the Connect faults'
refusals - nothing started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.checker.promise import AT_LEAST_ONCE, EXACTLY_ONCE
from harness.environment.base import BackendAbilities
from harness.errors import BadInput
from harness.faults.base import END, START
from harness.faults.families.connect import (
    KILL_WORKER,
    KILL_WORKER_WHEN_BACK,
    TASKS_PLACED,
    ConnectWorkerKill,
    placed_within_s,
    unplaced,
)
from harness.faults.kinds import parse_fault
from harness.faults.nemesis import WAIT_TIMEOUT_S
from harness.kafka.clients import CONSUMER_CLIENT
from harness.pipeline.connect.settings import (
    SINK_CONNECTOR,
    ConnectorState,
    ConnectSettings,
    TaskState,
    log_lines,
)
from harness.pipeline.runtimes import CONNECT
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.base import Place
from harness.pipeline.variants.connect import Connect
from harness.scenario import ScenarioError, parse_scenario, runnable
from tests.support import chaoslab

LOCAL = BackendAbilities("local", (1, 2, 3), link_faults=True)
PLACE = Place("{}", "run.connect-x", "run", "mongodb://127.0.0.1:1/?directConnection=true", "db")


def connect(name: str = "connect", **options: Any) -> Connect:
    made = make_variant(name, options)
    assert isinstance(made, Connect)
    return made


def scenario(**pipeline: Any) -> dict[str, Any]:
    return {
        "name": "connect",
        "description": "not from a seed; what to see: nothing",
        "workload": {"events": 100},
        "pipeline": pipeline,
        "variants": ["connect-default", "connect-idempotent"],
    }


def test_the_built_ins_run_on_connect_with_their_promises() -> None:
    default, keyed, business = (
        connect(n) for n in ("connect-default", "connect-idempotent", "connect-business-key")
    )
    assert {v.own_runtime() for v in (default, keyed, business)} == {CONNECT}
    assert default.label == "connect-default" and default.promise == AT_LEAST_ONCE
    assert default.config == {"connector.class": SINK_CONNECTOR}
    assert keyed.promise.name == EXACTLY_ONCE.name
    assert keyed.unique_index == ("event_id",) and business.promise == EXACTLY_ONCE
    assert business.unique_index == ("payload.source.txId", "order_id")
    # A built-in's config entries go over its own, under its name.
    tuned = connect("connect-default", config={"max.batch.size": 10})
    assert tuned.config["max.batch.size"] == 10 and tuned.label == "connect-default"


def test_a_pasted_config_runs_unchanged_but_for_where_it_reads_and_writes() -> None:
    pasted = {
        "name": "orders-sink",
        "connector.class": SINK_CONNECTOR,
        "tasks.max": 2,
        "topics": "prod.orders",
        "connection.uri": "mongodb+srv://user:secret@prod.example.net/?retryWrites=false"
        "&w=majority&tls=true&replicaSet=prod-0&socketTimeoutMS=5000",
        "database": "prod",
        "collection": "orders_raw",
        "errors.tolerance": "all",
        "errors.deadletterqueue.context.headers.enable": True,
        "consumer.override.group.id": "theirs",
    }
    variant = connect(config=pasted, label="prod", promised="at-least-once")
    config = variant.connector_config(PLACE)
    assert config == {
        "name": PLACE.name,
        "connector.class": SINK_CONNECTOR,
        "tasks.max": "2",
        "topics": "run",
        # The lab's address, with the deployment's client settings (not its hosts or TLS).
        "connection.uri": "mongodb://127.0.0.1:1/?directConnection=true&retryWrites=false"
        "&w=majority&socketTimeoutMS=5000",
        "database": "db",
        "collection": "orders_raw",
        "errors.tolerance": "all",
        "errors.deadletterqueue.context.headers.enable": "true",
        "consumer.override.group.id": PLACE.name,
        "consumer.override.client.id": f"{CONSUMER_CLIENT}-connect-{PLACE.name}",
    }
    assert variant.label == "prod" and variant.landing().collection == "orders_raw"


def test_a_config_without_a_connector_class_or_promise_is_named() -> None:
    with pytest.raises(BadInput, match=r"connector\.class") as caught:
        connect(config={"tasks.max": 1}, promised="always")
    assert "promised: one of" in str(caught.value)


def test_the_cluster_settings_are_checked_with_every_problem_named() -> None:
    bad = {"workers": 9, "offset.flush.interval.ms": "soon", "group.id": "mine"}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario(connect=bad))
    said = str(caught.value)
    assert "connect.workers: a whole number of workers, 1 to 4; got 9" in said
    assert "connect.offset.flush.interval.ms: milliseconds" in said
    assert "connect.group.id: not a worker setting the lab passes" in said
    fine = parse_scenario(scenario(connect={"workers": 3, "offset.flush.interval.ms": 5000}))
    assert {r for r, _ in fine.lanes} == {"connect"} and fine.setting.consumers == 3


def test_the_run_settings_split_workers_from_worker_settings(tmp_path: Path) -> None:
    spec = {"workers": 3, "scheduled.rebalance.max.delay.ms": 60000}
    settings = ConnectSettings.for_run(
        spec, bootstrap="b:1", group="g", folder=tmp_path / "c", base=tmp_path
    )
    assert settings.workers == 3 and settings.worker == {"scheduled.rebalance.max.delay.ms": 60000}
    assert ConnectSettings.from_json(settings.to_json()) == settings
    # A worker says where its REST API listens; a task's worker id is found by it.
    settings.rest_file(1).write_text("http://127.0.0.1:8301\n")
    assert settings.worker_index("127.0.0.1:8301") == 1
    assert settings.worker_index("127.0.0.1:9999") is None
    assert settings.rest_urls() == ["http://127.0.0.1:8301"]


def test_a_lane_records_its_connectors_warnings_the_workers_and_their_rebalances() -> None:
    lines = log_lines("run.connect-a")
    t = "2026-11-26T13:22:16.177Z"
    recorded = [
        f"{t} ERROR [run.connect-a|task-0] WorkerSinkTask{{id=run.connect-a-0}} Task threw",
        f"{t} WARN [Worker clientId=connect-1, groupId=g] Catching up to assignment's config",
        f"{t} INFO [Worker clientId=connect-1, groupId=g] Rebalance started (WorkerCoordinator)",
        f"{t} INFO [Worker clientId=connect-1, groupId=g] Joined group at generation 9 with",
    ]
    left = [
        f"{t} ERROR [run.connect-b|task-0] another connector's task (WorkerTask)",
        f"{t} INFO [run.connect-a|task-0] its own, but not a warning (WorkerSinkTask)",
        f"{t} INFO [Worker clientId=connect-1, groupId=g] Herder started (DistributedHerder)",
    ]
    assert [bool(lines.search(x)) for x in recorded + left] == [True] * 4 + [False] * 3


def test_connect_faults_are_refused_where_there_is_no_connect_lane() -> None:
    raw = scenario()
    raw["faults"] = [
        {"kind": "connect-worker-kill", "worker": 2, "at": 1},
        {"kind": "connect-task-restart", "of": "connect-naive", "at": 2},
    ]
    with pytest.raises(ScenarioError) as caught:
        runnable(parse_scenario(raw), LOCAL)
    said = str(caught.value)
    assert "the cluster has 2 workers; no worker 2" in said
    assert "no lane 'connect-naive' in the scenario" in said

    listener_only = {**raw, "variants": ["idempotent"]}
    listener_only["faults"] = [{"kind": "connect-worker-kill", "at": 1}]
    with pytest.raises(ScenarioError, match="the scenario has no Connect lane"):
        runnable(parse_scenario(listener_only), LOCAL)
    with pytest.raises(ScenarioError, match="give worker or of"):
        parse_scenario({**raw, "faults": [{"kind": "connect-worker-kill", "worker": 1,
                                            "of": "connect-default", "at": 1}]})  # fmt: skip


def test_a_dead_letter_topic_named_in_a_config_is_the_lanes_with_its_origin_headers() -> None:
    dlq = {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "prod.dlq"}
    variant = connect("connect-default", config=dlq)
    config = variant.connector_config(PLACE)
    assert config["errors.deadletterqueue.topic.name"] == f"{PLACE.name}.dlq"
    assert config["errors.deadletterqueue.context.headers.enable"] == "true"
    assert "errors.deadletterqueue.topic.name" not in connect("connect-default").connector_config(
        PLACE
    )


def test_the_cli_refuses_a_config_connect_refuses_with_exit_2_before_anything_starts(
    tmp_path: Path,
) -> None:
    """Connect's own validation (its herder, in a JVM of its own with no cluster), word for
    word; the lab's placeholder address is not the user's problem."""
    raw = scenario()
    raw["variants"] = [
        "connect-idempotent",
        {"name": "connect", "label": "pasted",
         "config": {"connector.class": SINK_CONNECTOR, "errors.tolerance": "some",
                    "tasks.max": "many"}},
    ]  # fmt: skip
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = chaoslab("run", str(path), "--out", "run", cwd=tmp_path, timeout=400)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stderr
    assert "variants[1].config: errors.tolerance: Invalid value some for configuration " \
           "errors.tolerance: Invalid enumerator value" in said  # fmt: skip
    assert "variants[1].config: tasks.max: Invalid value many" in said
    assert "variants[0]" not in said and "connection.uri" not in said
    assert "starting" not in done.stdout and not (tmp_path / "run").exists()


def test_the_groups_leader_is_the_last_rebalance_any_worker_logged(tmp_path: Path) -> None:
    settings = ConnectSettings.for_run(
        {}, bootstrap="b:1", group="g", folder=tmp_path, base=tmp_path
    )
    for index, port in ((0, 8300), (1, 8301)):
        settings.rest_file(index).write_text(f"http://127.0.0.1:{port}\n")
    assert settings.leader_index() is None
    joined = "INFO [Worker clientId=c, groupId=g] Joined group at generation {} with protocol " \
             "version 2 and got assignment: Assignment{{error=0, leader='x', " \
             "leaderUrl='http://127.0.0.1:{}/', offset=3}} (DistributedHerder)\n"  # fmt: skip
    settings.log(0).write_text(f"2026-11-26T14:02:01.000Z {joined.format(1, 8300)}")
    settings.log(1).write_text(
        f"2026-11-26T14:02:01.100Z {joined.format(1, 8300)}"
        f"2026-11-26T14:02:16.780Z {joined.format(2, 8301)}"  # worker 0 gone: 1 leads
    )
    assert settings.leader_index() == 1
    follower = parse_fault({"kind": "connect-worker-kill", "worker": "follower", "at": 1}, "f")
    assert isinstance(follower, ConnectWorkerKill)
    assert follower.worker.pick(settings) == (0, ", a follower")
    leader = parse_fault({"kind": "connect-worker-kill", "worker": "leader", "at": 1}, "l")
    assert isinstance(leader, ConnectWorkerKill) and leader.worker.pick(settings)[0] == 1
    with pytest.raises(ScenarioError, match=r"leader or follower; got 'boss'"):
        parse_scenario({**scenario(), "faults": [{"kind": "connect-worker-kill",
                                                  "worker": "boss", "at": 1}]})  # fmt: skip


def test_a_failed_tasks_reason_is_its_first_line_and_its_root_cause() -> None:
    trace = (
        "org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error handler\n"
        "\tat org.apache.kafka.connect.runtime.errors.RetryWithToleranceOperator.execAndHandle\n"
        "Caused by: org.apache.kafka.connect.errors.DataException: Converting byte[] to Kafka "
        "Connect data failed due to serialization error: \n"
        "\tat org.apache.kafka.connect.json.JsonConverter.toConnectData(JsonConverter.java:333)\n"
        "Caused by: org.apache.kafka.common.errors.SerializationException: "
        "com.fasterxml.jackson.core.io.JsonEOFException: Unexpected end-of-input\n"
    )
    assert TaskState(0, "FAILED", "w", trace).reason == (
        "org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error handler "
        "(caused by org.apache.kafka.common.errors.SerializationException: "
        "com.fasterxml.jackson.core.io.JsonEOFException: Unexpected end-of-input)"
    )
    assert TaskState(0, "RUNNING", "w").reason == ""


def test_a_worker_kill_waits_until_connect_has_started_every_task_on_a_worker_that_runs(
    tmp_path: Path,
) -> None:
    kill = parse_fault({"kind": "connect-worker-kill", "worker": "follower", "at": 1}, "k")
    steps = kill.steps(1)
    assert [(s.action, s.waits) for s in steps] == [
        (START, False), (KILL_WORKER, False), (KILL_WORKER_WHEN_BACK, True),
        (TASKS_PLACED, True), (END, False),
    ]  # fmt: skip
    # Until when: the workers' session timeout, the scheduled rebalance's delay, a margin -
    # past the nemesis's deadline for a waiting step with Connect's defaults (its own, then).
    scenario = {"scheduled.rebalance.max.delay.ms": 60000}
    minute = ConnectSettings.for_run(scenario, bootstrap="b:1", group="g", folder=tmp_path,
                                     base=tmp_path)  # fmt: skip
    assert placed_within_s(minute) == 60 + 10 + 30
    defaults = ConnectSettings.for_run({}, bootstrap="b:1", group="g", folder=tmp_path,
                                       base=tmp_path)  # fmt: skip
    assert placed_within_s(defaults) == 300 + 10 + 30 > WAIT_TIMEOUT_S
    # What: a task is placed once it runs - or failed, which it stays - on a worker that runs.
    # Connect's status says RUNNING on a dead worker until its scheduled rebalance.
    dead, alive = "127.0.0.1:8300", "127.0.0.1:8301"
    tasks = (
        TaskState(0, "RUNNING", dead),
        TaskState(1, "RUNNING", alive),
        TaskState(2, "UNASSIGNED", alive),
        TaskState(3, "FAILED", alive, "org.apache.kafka.connect.errors.ConnectException"),
    )
    state = ConnectorState("run.connect-a", "RUNNING", alive, tasks)
    assert unplaced("a", state, {alive}.__contains__) == [
        f"task 0 of a (RUNNING on {dead})",
        f"task 2 of a (UNASSIGNED on {alive})",
    ]
    assert (
        unplaced("a", ConnectorState("c", "RUNNING", alive, tasks[1:2]), {alive}.__contains__) == []
    )
    assert unplaced("a", None, {alive}.__contains__) == ["a's tasks (Connect lists none)"]
