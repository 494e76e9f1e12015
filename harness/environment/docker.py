"""The docker backend (testcontainers with the real apache/kafka and mongo images).

Only its availability check exists so far: the backend itself is a later issue. The check is
what ``chaoslab doctor`` and the docker tests use to say why it cannot run on a machine.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_SOCKET = Path("/var/run/docker.sock")


def docker_engine_problem(timeout: float = 3.0) -> str | None:
    """None when a Docker engine answers; otherwise why not, in words for the user."""
    try:
        import docker
    except ImportError as exc:  # testcontainers depends on it; only a broken install lacks it
        return f"the docker Python package is missing ({exc})"
    where = os.environ.get("DOCKER_HOST")
    if where is None and not DEFAULT_SOCKET.exists():
        return (
            f"no Docker engine: DOCKER_HOST is not set and {DEFAULT_SOCKET} does not exist "
            "(a docker CLI may be installed, but no daemon is running)"
        )
    where = where or f"unix://{DEFAULT_SOCKET}"
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:
        return f"no Docker engine answers at {where} ({exc})"
    return None
