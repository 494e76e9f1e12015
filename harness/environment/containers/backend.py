"""The containers backend as the registry (``harness.environment.backends``) loads it, when it is
asked for: its environment, and the commands only it has - building its images, rendering the
upstream images' topology, describing the container engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.environment.containers import engine, images, official
from harness.environment.containers.environment import ContainersEnvironment

ENVIRONMENT = ContainersEnvironment


def build_images(scratch: Path, progress: Callable[[str], None]) -> str:
    """Build the lab's images now (``up`` builds what is missing anyway); their tag."""
    with engine.engine_for_building(scratch) as found:
        return images.build_lab(found, progress).tag


def official_topology(kind: str, directory: Path) -> str:
    """The containers ``up --images KIND`` would start, as JSON (started nothing)."""
    return official.to_json(official.rendered(kind, directory))


def engine_check() -> tuple[str | None, str]:
    """(why no engine answers, or None; what the engine is)."""
    return engine.engine_problem(), engine.describe_engine()
