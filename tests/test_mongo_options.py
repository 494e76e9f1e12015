"""The consumers' MongoDB client settings a scenario sets (pure): checked by name and kind, and
carried in the URI every consumer is given."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from harness.pipeline.mongo_options import max_commit_time_ms, problems, uri_with
from harness.scenario import ScenarioError, parse_scenario

URI = "mongodb://127.0.0.1:27017/?directConnection=true&retryWrites=true"


def test_a_production_consumers_settings_go_into_its_uri_over_the_drivers_defaults() -> None:
    settings = {"retryWrites": False, "socketTimeoutMS": 3000, "w": "majority",
                "maxCommitTimeMS": 5000}  # fmt: skip
    query = parse_qs(urlsplit(uri_with(URI, settings)).query)
    assert query == {
        "directConnection": ["true"], "retryWrites": ["false"], "socketTimeoutMS": ["3000"],
        "w": ["majority"],
    }  # fmt: skip
    assert max_commit_time_ms(settings) == 5000  # a transaction's, not the URI's
    assert uri_with(URI, {}) == URI and max_commit_time_ms({}) is None


def test_every_wrong_setting_is_named() -> None:
    found = problems({"retryWrite": True, "w": "most", "socketTimeoutMS": -1, "retryWrites": 1})
    assert [where for where, _ in found] == [
        "mongo.retryWrite", "mongo.w", "mongo.socketTimeoutMS", "mongo.retryWrites",
    ]  # fmt: skip
    assert "known: retryWrites, w, wtimeoutMS" in found[0][1]


def test_a_scenario_with_a_wrong_setting_is_refused_naming_it(tmp_path: Path) -> None:
    raw = {
        "name": "timeouts",
        "workload": {"events": 10},
        "pipeline": {"mongo": {"socketTimeoutMs": 3000}},
    }
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(raw, tmp_path / "timeouts.yaml")
    assert "pipeline.mongo.socketTimeoutMs: unknown MongoDB client setting" in str(caught.value)
