"""A team's own connector, from a plugin folder its scenario names (``pipeline.connect.plugins``),
on the run's Connect workers beside MongoDB's: here a sink of its own, built as teams wrap
MongoDB's (a class of their own that extends it), in a plugin folder of Connect's layout."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, read_history
from harness.kafka.clients import admin
from harness.pipeline.connect.settings import ConnectSettings
from harness.pipeline.runtime import RuntimeConfig
from harness.results.model import RESULTS
from tests.connect_plugin import SINK, build_plugin, orders_scenario
from tests.support import chaoslab
from tests.tiers import LIBRARY


@LIBRARY  # a Connect cluster of its own for a team's plugin; make test's Connect
# lanes run MongoDB's connector from the lab's plugin folder (the connect-* cuts)
def test_a_connector_from_the_scenarios_plugin_folder_runs_and_without_it_is_refused(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    build_plugin(tmp_path)
    raw = orders_scenario()
    # Without the folder: Connect's own word that it knows no such class, exit 2.
    path = tmp_path / "orders-sink.yaml"
    path.write_text(yaml.safe_dump(raw))
    refused = chaoslab("run", path.name, "--env", str(scenario_env.directory), "--out", "refused",
                       cwd=tmp_path, timeout=400)  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "variants[0].config" in refused.stderr and SINK in refused.stderr, refused.stderr
    assert not (tmp_path / "refused").exists()

    # With it (relative to the scenario's file, run from another folder): counted as any lane.
    # (offsets flushed every 5 s, not Connect's 60: the run ends once the restarted worker's
    # writes are committed)
    raw["pipeline"] = {
        "connect": {"workers": 1, "plugins": ["plugins"], "offset.flush.interval.ms": 5000}
    }
    # And its task restarted through Connect's REST API mid-stream, as an operator does, then
    # its worker restarted cleanly, as a rolling deploy does.
    raw["faults"] = [
        {"kind": "connect-task-restart", "at": 1},
        {"kind": "connect-worker-kill", "worker": 0, "hard": False, "at": 2},
    ]
    raw["workload"] = {**raw["workload"], "rate": 50}  # 6 s: records still come after the restart
    path.write_text(yaml.safe_dump(raw))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # As a matrix, which deletes each run's topics once judged: the Connect cluster's too.
    done = chaoslab("matrix", str(path), "--env", str(scenario_env.directory), "--out", "run",
                    cwd=elsewhere, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = elsewhere / "run" / "orders-sink"
    (row,) = json.loads((run / RESULTS).read_text())["results"]
    assert (row["runtime"], row["variant"]) == ("connect", "orders")
    assert row["in_sink"] == row["acked"] == 300 and row["duplicates"] == row["lost"] == 0
    logs = "".join(p.read_text() for p in run.glob("*.connect/connect-*.log"))
    assert f"Added plugin '{SINK}'" in logs
    events = read_history(Path(row["directory"]) / "history")
    steps = [e.detail for e in events if e.kind is EventKind.FAULT_STEP]
    assert steps[:2] == [
        "restarted task 0 of orders through REST",
        "stopped worker connect-0 cleanly (SIGTERM); it ran orders's tasks 0, 1, 2",
    ], steps
    # The stop's window lasted until the restarted worker, alone, ran the tasks again.
    assert len(steps) == 3, steps
    assert steps[2].startswith("Connect's tasks all started on live workers again, "), steps
    runtime = RuntimeConfig.from_json((Path(row["directory"]) / "runtime.json").read_text())
    # The worker stopped task 0 and created it again: once more than the others (which the
    # restarted worker creates again too): Connect's own word.
    created = [logs.count(f"Creating task {runtime.group}-{t}") for t in range(3)]
    assert created[0] == created[1] + 1 == created[2] + 1, created
    # The clean stop was Connect's own shutdown, and the lab started the worker again.
    assert "Kafka Connect stopped" in logs
    exits = [e.detail for e in events if e.kind is EventKind.RUNTIME_EXIT]
    assert len(exits) == 1 and exits[0].startswith("connect-0 stopped cleanly"), exits
    assert len([e for e in events if e.kind is EventKind.RUNTIME_START]) == 2
    storage = set(ConnectSettings.from_json(runtime.connect).storage_topics.values())
    assert len(storage) == 3
    left = set(admin(scenario_env.kafka_bootstrap).list_topics(timeout=10).topics)
    assert not storage & left, storage & left
