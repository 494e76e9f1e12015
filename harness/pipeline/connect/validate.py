"""Connector configs checked by Kafka Connect itself before anything starts: the herder a
worker's REST API answers ``PUT /connector-plugins/CLASS/config/validate`` with, run in a JVM of
its own with MongoDB's connector on its plugin path and no cluster
(``harness/environment/connect_hooks``). Connect's messages are the user's to read, word for
word.

The lab's own settings (``harness.pipeline.variants.connect``) stand in for the run's addresses:
MongoDB's connector tries the ``connection.uri`` it is given, and the placeholder answers
nothing, so what Connect says of it is not the user's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from harness.environment import jars
from harness.environment.jvm import LIGHT_JVM
from harness.errors import LabError
from harness.pipeline.connect.settings import plugin_discovery, plugin_path
from harness.pipeline.variants.base import Place

MAIN = "chaoslab.connect.Validate"
TIMEOUT_S = 300.0  # a JVM scanning a scenario's plugins, on a loaded machine
# The address given in a config's place: nothing listens on the discard port.
NOWHERE = "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=200&connectTimeoutMS=200"
PLACE = Place("{}", "chaoslab-validate", "chaoslab.validate", NOWHERE, "chaoslab")
LAB_KEYS = ("connection.uri",)  # what the placeholder makes Connect say: not the user's
LOG4J2 = jars.POMS / "connect-log4j2.properties"


def refusals(configs: Sequence[Mapping[str, str]], plugins: Sequence[Path] = ()) -> list[list[str]]:
    """Connect's problems with each config (``key: message``; none: Connect takes it), with
    the scenario's own plugin folders beside MongoDB's connector."""
    given = json.dumps(list(configs), sort_keys=True)
    found = _validate(given, plugin_path(plugins), plugin_discovery(plugins))
    return [list(problems) for problems in found]


@cache  # a run checks its scenario twice, explore each trial's: one JVM per set of configs
def _validate(configs: str, plugins: str, discovery: str) -> tuple[tuple[str, ...], ...]:
    java = shutil.which("java")
    if java is None:
        raise LabError("Kafka Connect's validation needs java (Debian: openjdk-17-jre-headless)")
    classpath = f"{jars.connect().classpath()}:{jars.connect_hooks().classpath()}"
    with tempfile.TemporaryDirectory(prefix="chaoslab-validate-") as folder:
        given = Path(folder) / "configs.json"
        given.write_text(configs)
        argv = [java, "-Xmx256m", *LIGHT_JVM, f"-Dlog4j2.configurationFile=file:{LOG4J2}",
                "-cp", classpath, MAIN, plugins, str(given), discovery]  # fmt: skip
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise LabError(f"Kafka Connect's validation took over {TIMEOUT_S:.0f}s") from None
        answer = given.with_name(given.name + ".out")
        if done.returncode != 0 or not answer.exists():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise LabError(f"Kafka Connect's validation failed (exit {done.returncode}):\n{tail}")
        found: list[list[str]] = json.loads(answer.read_text())
    return tuple(
        tuple(p for p in problems if not p.startswith(tuple(f"{k}:" for k in LAB_KEYS)))
        for problems in found
    )
