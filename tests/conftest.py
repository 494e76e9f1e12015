from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.environment import LocalEnvironment


@pytest.fixture(scope="session")
def lab_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnvironment]:
    """One local environment shared by the tests that only need servers to talk to.

    Tests that bounce a server leave it running again; tests about the environment's own
    life cycle start environments of their own.
    """
    with LocalEnvironment(tmp_path_factory.mktemp("env")) as env:
        yield env


@pytest.fixture
def scenario_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEnvironment]:
    """A fresh local environment for one test that runs scenarios.

    Not the shared one: a scenario's faults restart and kill nodes, its topics and consumer
    groups stay, and a test that counts what happened (timings, rates, coordinator errors)
    should not share them with others.
    """
    with LocalEnvironment(tmp_path_factory.mktemp("scenario-env")) as env:
        yield env
