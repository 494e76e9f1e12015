"""connect-worker-kill on a run's own Connect cluster: the fault is under way until Connect has
started the lost worker's tasks on a worker that runs, so the run does not end before the
history shows it; a kill aimed at a worker that is down kills nothing and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, read_history
from harness.pipeline.connect.settings import ConnectSettings
from harness.pipeline.runtime import RuntimeConfig
from harness.run.runner import run_scenario
from harness.scenario import parse_scenario
from tests.tiers import LIBRARY

DELAY_S = 15  # the scheduled rebalance's delay: the tasks move 10 s (the workers' session) later
SCENARIO: dict[str, Any] = {
    "name": "connect-tasks-placed",
    "description": "not from a seed; what to see: the lost worker's tasks moved before the end",
    "seed": 3,
    "workload": {"events": 300, "keys": 50, "partitions": 3, "rate": 100},
    "pipeline": {
        "connect": {
            "workers": 2,
            "scheduled.rebalance.max.delay.ms": DELAY_S * 1000,
            "offset.flush.interval.ms": 1000,
        },
        "restart_delay_s": 600,  # the killed worker is gone for good
        "timeout_s": 180,
    },
    # The tasks' consumers leave their group 6 s after the kill (the brokers' least session),
    # not the Kafka consumer's 45 s: the connector's other tasks take the partitions over and
    # the lane is done long before Connect moves the lost tasks - without the fault's wait for
    # them, the run ended first and the history showed no task moved.
    "variants": [
        {
            "name": "connect-idempotent",
            "config": {"tasks.max": 3, "consumer.override.session.timeout.ms": 6000},
        }
    ],
    # Mid-stream, by record counts (the fault clock starts once the lane wrote records, which
    # can be near the workload's end): the dead task's partition is stalled until its
    # consumers' session ends, so the lane is not done when the second kill comes.
    "faults": [
        {"kind": "connect-worker-kill", "name": "lost", "worker": "follower", "at_event": 100},
        # The same worker again while it is down (gone for good): nothing to stop cleanly.
        {"kind": "connect-worker-kill", "name": "again", "worker": "follower", "at_event": 200,
         "hard": False},
    ],
}  # fmt: skip


@LIBRARY  # connect-worker-loss's cut loses a worker and follows its tasks in make test
def test_a_lost_workers_tasks_are_started_elsewhere_before_the_run_ends(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    result = run_scenario(scenario_env, parse_scenario(SCENARIO), tmp_path, progress=print)
    (lane,) = result.variants
    assert lane.directory is not None and (lane.verdict.lost, lane.verdict.duplicates) == (0, 0)
    events = read_history(lane.directory / "history")
    steps = [
        (e.t, e.detail) for e in events if e.kind is EventKind.FAULT_STEP and e.fault == "lost"
    ]
    kill_at, killed = steps[0]
    assert killed.startswith("SIGKILLed worker connect-") and ", a follower; it ran " in killed
    dead = int(killed.split()[2].removeprefix("connect-").rstrip(","))
    config = RuntimeConfig.from_json((lane.directory / "runtime.json").read_text())
    settings = ConnectSettings.from_json(config.connect)
    ids = [urlsplit(settings.rest_file(i).read_text().strip()).netloc for i in range(2)]
    survivor = ids[1 - dead]
    states = [(e.t, e.detail) for e in events if e.kind is EventKind.CONNECTOR_STATE]
    # The tasks the dead worker ran, as Connect last said before the kill.
    last = {d.split()[1]: d for t, d in states if t < kill_at and d.startswith("task ")}
    lost = sorted(task for task, said in last.items() if said.endswith(f" on {ids[dead]}"))
    assert lost, last
    # The kill's record names them, as Connect said just before it.
    ran = f"{lane.variant}'s task{'s' * (len(lost) > 1)} {', '.join(lost)}"
    assert killed.endswith(f"; it ran {ran}"), (killed, lost)
    moved: dict[str, float] = {}  # each task's first start on the survivor after the kill
    for t, d in states:
        if t > kill_at and d.startswith("task ") and d.endswith(f"RUNNING on {survivor}"):
            moved.setdefault(d.split()[1], t - kill_at)
    assert sorted(set(moved) & set(lost)) == lost, (lost, states)
    # Connect moved them after its scheduled rebalance's delay, and the fault's wait saw it:
    # its last step, at most a poll of the lane's watch before the watch did.
    assert all(moved[task] >= DELAY_S for task in lost), moved
    assert len(steps) == 2, steps
    placed_at, placed = steps[1]
    assert placed.startswith("Connect's tasks all started on live workers again, "), placed
    assert all(kill_at + moved[task] <= placed_at + 2.0 for task in lost), (moved, placed_at)
    after = float(placed.split("again, ")[1].split()[0])
    assert abs(after - (placed_at - kill_at)) < 0.5, (placed, placed_at - kill_at)
    end = next(e.t for e in events if e.kind is EventKind.FAULT_END and e.fault == "lost")
    assert placed_at <= end  # the fault's window spans the wait: the timeline shows it
    run_end = next(e.t for e in events if e.kind is EventKind.RUN_END)
    assert kill_at + max(moved[task] for task in lost) < run_end
    # What the wait is for: the lane had consumed everything before Connect moved the tasks.
    caught_up = next(e.t for e in events if e.kind is EventKind.CAUGHT_UP)
    assert caught_up < kill_at + min(moved[task] for task in lost), (caught_up, moved)

    # The second kill found the worker down for good: it stopped nothing, and said so.
    (again,) = [e.detail for e in events if e.kind is EventKind.FAULT_STEP and e.fault == "again"]
    assert again.startswith(f"connect-{dead} down, its restart due in ") and again.endswith(
        " s, past the kill's 60 s: not killed"
    ), again
    assert [(m.name, m.reason) for m in lane.unfired] == [("again", again)]
    exits = [e.detail for e in events if e.kind is EventKind.RUNTIME_EXIT]
    assert exits == [f"connect-{dead} killed by SIGKILL"], exits  # not "stopped cleanly"
