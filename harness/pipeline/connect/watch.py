"""One Connect lane's connector, put on the run's cluster and watched through Connect's REST API
from the lane's observer (``harness.pipeline.observer``): its config is PUT once every worker
has joined the workers' group and one answers, then each poll reads its status and writes what
changed into the lane's history - the connector's state and each task's (RUNNING, UNASSIGNED
while a departed worker's tasks wait for the scheduled rebalance, FAILED with the first line of
its trace).

A task that FAILED stays failed: Connect does not restart it (a user restarts it through REST).
The lane's pipeline has stopped for good, and the history says so (FAILED_FOR_GOOD), so the run
ends with that finding rather than with a timeout.
"""

from __future__ import annotations

import time

from harness.history.events import EventKind, HistoryWriter, connector_state
from harness.pipeline.connect.settings import (
    ConnectError,
    ConnectorState,
    ConnectRest,
    ConnectSettings,
)

FAILED = "FAILED"


class ConnectorWatch:
    """Creates connector ``name`` with ``config`` on the cluster, then follows its status."""

    def __init__(self, settings: ConnectSettings, name: str, config: dict[str, str]) -> None:
        self.name, self.config, self.settings = name, config, settings
        self.rest = ConnectRest(settings, timeout=5.0)
        self.started = time.monotonic()
        self.created = False
        self._seen: dict[str, str] = {}  # "connector" / "task N" -> what was recorded
        self.failure = ""  # the first task that FAILED, and why

    def poll(self, history: HistoryWriter) -> None:
        try:
            if not self.created:
                # Not before every worker is in the workers' group: a connector created while
                # one is still joining has its tasks all on the first, and the join moves them
                # (connect-worker-loss once had connect-default's three moved to the worker it
                # killed half a second later: they had written nothing yet, so no copy).
                if self.settings.joined() < self.settings.workers:
                    return
                self.rest.put_config(self.name, self.config)
                self.created = True
                created = connector_state("connector", f"{self.name} created")
                history.record(EventKind.CONNECTOR_STATE, detail=created)
            state = self.rest.status(self.name)
        except ConnectError:
            return  # no worker answers yet, or one is restarting: ask again
        if state is not None:
            self._saw(state, history)

    def _saw(self, state: ConnectorState, history: HistoryWriter) -> None:
        now = {"connector": f"{state.state} on {state.worker}"}
        reasons = {}
        for task in state.tasks:
            now[f"task {task.task}"] = f"{task.state} on {task.worker}"
            if task.state == FAILED:
                reasons[f"task {task.task}"] = task.reason
        for what, said in now.items():
            if self._seen.get(what) == said:
                continue
            self._seen[what] = said
            reason = reasons.get(what, "")
            history.record(
                EventKind.CONNECTOR_STATE,
                detail=connector_state(what, said + (f": {reason}" if reason else "")),
            )
        if reasons and not self.failure:
            what, reason = next(iter(reasons.items()))
            at = time.monotonic() - self.started
            self.failure = (
                f"{what} FAILED at +{at:.0f} s (Connect leaves a failed task failed): {reason}"
            )
            history.record(EventKind.FAILED_FOR_GOOD, detail=self.failure)
