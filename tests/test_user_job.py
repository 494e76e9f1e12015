"""A user's own Spark job (tests/user_job.py) under a library scenario's faults, judged like
any variant: the code runs unchanged, the lab kills its driver between the job's write and
Spark's checkpoint commit, and counts what the replays left."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.environment.backends import get_backend
from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, read_history
from harness.run.runner import run_scenario
from harness.scenario import ScenarioError, parse_scenario, runnable
from tests.support import SPARK
from tests.tiers import LIBRARY

JOB = {"name": "spark-job", "job": "tests.user_job:ingest"}


def cdc_crash_before_ack(**changes: object) -> dict[str, object]:
    spec = yaml.safe_load(Path("scenarios/cdc-crash-before-ack.yaml").read_text())
    # The job alone: one Spark driver (the lab's own variants ran under these kills in
    # test_pipeline and the library).
    expect = {"*": {"lost": 0, "duplicates": ">0"}}
    spec.pop("demo")  # the library's cut names the variants this replaces
    return {**spec, "runtimes": ["spark"], "variants": [JOB], "expect": expect, **changes}


def test_a_job_is_checked_before_anything_starts() -> None:
    with pytest.raises(ScenarioError, match="cannot import no_such_module"):
        parse_scenario(
            cdc_crash_before_ack(variants=[{"name": "spark-job", "job": "no_such_module:f"}])
        )
    with pytest.raises(ScenarioError, match="must be module:callable"):
        parse_scenario(cdc_crash_before_ack(variants=[{"name": "spark-job", "job": "ingest"}]))
    listener = parse_scenario(cdc_crash_before_ack(runtimes=["listener", "spark"]))
    with pytest.raises(ScenarioError, match=r"variants\[0\]: spark-job does not run on listener"):
        runnable(listener, get_backend("local").abilities)


@pytest.mark.servers
@SPARK
@LIBRARY  # a user's job killed and replayed; make test runs one beside the connector's (below)
def test_a_users_job_runs_under_cdc_crash_before_acks_faults(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # One kill, not the scenario's three (each restart of a driver lengthens the suite's Spark
    # chain; the library test plays all three on the lab's own variants).
    kill = {"kind": "consumer-crash", "point": "after_write_before_commit", "at_batch": 2}
    scenario = parse_scenario(cdc_crash_before_ack(faults=[kill]))
    result = run_scenario(scenario_env, scenario, tmp_path / "run", progress=lambda _m: None)
    rows = {r.variant: r for r in result.variants}
    job = rows["job-ingest"]
    # Its driver was killed after the job's write, before Spark's commit, and restarted; Spark
    # replayed that batch into the job.
    assert (job.crashes, job.restarts) == (1, 1)
    assert job.directory is not None
    events = read_history(job.directory / "history")
    crashed = [e.batch for e in events if e.kind is EventKind.CRASH]
    written = [e.batch for e in events if e.kind is EventKind.WRITTEN]
    assert len(crashed) == 1 and all(written.count(b) == 2 for b in crashed), (crashed, written)
    # Counted like any variant: the replayed batches' changes twice, nothing lost.
    assert job.verdict.duplicates > 0 and set(job.verdict.copies) == {2}
    assert (job.verdict.lost, job.verdict.phantoms, job.verdict.stale) == (0, 0, 0)
    # It drops what does not parse, where the lab's variants dead-letter it: the checker says so.
    assert job.verdict.dead_lettered == 0 and job.verdict.poison_missing > 0


@pytest.mark.servers
@SPARK
def test_a_job_with_its_own_query_and_one_with_the_connector_are_judged(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    spec = {
        "name": "own-query",
        "seed": 3,
        "workload": {"events": 600, "keys": 100, "partitions": 3},
        "runtimes": ["spark"],
        "variants": [
            {"name": "spark-job", "job": "tests.user_job:ingest_query"},
            # A job that writes with MongoDB's Spark connector runs as it is: the session has
            # the connector.
            {"name": "spark-job", "job": "tests.user_job:ingest_with_connector"},
        ],
    }
    result = run_scenario(
        scenario_env, parse_scenario(spec), tmp_path / "run", progress=lambda _m: None
    )
    job, connector = result.variants
    assert (job.variant, connector.variant) == ("job-ingest_query", "job-ingest_with_connector")
    assert (connector.verdict.duplicates, connector.verdict.lost) == (0, 0)
    assert (connector.verdict.stale, connector.verdict.in_sink) == (0, 600)
    # The lab saw its batches commit (the run ended once they covered every record) and
    # judged the collections it wrote: exactly once, with no fault.
    assert job.directory is not None
    commits = [e for e in read_history(job.directory / "history") if e.kind is EventKind.COMMIT]
    assert commits and sum(commits[-1].offsets.values()) == 600
    assert (job.verdict.duplicates, job.verdict.lost, job.verdict.stale) == (0, 0, 0)
    assert job.verdict.in_sink == 600
