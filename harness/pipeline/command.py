"""What a command consumer is given: environment variables only, so a program in any language
can be put under the lab's faults without importing anything of the lab's.

The addresses are the ones the lab's own consumers get (through the fault proxies where the
backend has them); the MongoDB URI carries the consumers' appName, so a ``mongo-failcommand``
fault strikes the program's writes and not the lab's reads.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from harness.kafka.clients import CONSUMER_CLIENT
from harness.pipeline.batch import dead_letter_topic
from harness.pipeline.runtime import CONSUMER_APP, RuntimeConfig

# Name: what it holds. The README's "Your own consumer" section lists the same.
VARIABLES = {
    "CHAOSLAB_KAFKA_BOOTSTRAP": "host:port of the Kafka cluster",
    "CHAOSLAB_TOPIC": "the topic to consume",
    "CHAOSLAB_GROUP_ID": "the consumer group every instance joins",
    "CHAOSLAB_MONGO_URI": "the MongoDB URI, as is (it carries appName and options)",
    "CHAOSLAB_DATABASE": "the database to write in (new and empty for each run)",
    "CHAOSLAB_INSTANCE": "which instance this process is: 0, 1, ...",
    "CHAOSLAB_DLQ_TOPIC": "where records it cannot parse go (headers origin-partition, "
    "origin-offset)",
    "CHAOSLAB_CLIENT_ID": "the Kafka client.id to use: the fault proxy tells the consumers' "
    "connections from the producer's by it, so link faults reach the program",
}


def program_problem(argv: Sequence[str], cwd: Path) -> str:
    """Why ``argv`` cannot be started from ``cwd`` on this machine ('' if it can)."""
    if not argv:
        return "command: empty"
    first = argv[0]
    if "/" not in first:
        return "" if shutil.which(first) else f"command: {first!r} is not on PATH"
    path = cwd / first
    if not path.is_file() or not os.access(path, os.X_OK):
        return f"command: no program {first!r} in {cwd}"
    return ""


def with_app_name(uri: str, app: str = CONSUMER_APP) -> str:
    """``uri`` with ``appName`` set (replacing one it had)."""
    parts = urlsplit(uri)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "appname"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("appName", app)])))


def environment(config: RuntimeConfig, index: int) -> dict[str, str]:
    """The variables of instance ``index`` of the lane ``config`` describes."""
    found = {
        "CHAOSLAB_KAFKA_BOOTSTRAP": config.bootstrap,
        "CHAOSLAB_TOPIC": config.topic,
        "CHAOSLAB_GROUP_ID": config.group,
        "CHAOSLAB_MONGO_URI": with_app_name(config.mongo_uri),
        "CHAOSLAB_DATABASE": config.database,
        "CHAOSLAB_INSTANCE": str(index),
        "CHAOSLAB_DLQ_TOPIC": dead_letter_topic(config.group),
        "CHAOSLAB_CLIENT_ID": f"{CONSUMER_CLIENT}-command-{index}",
    }
    assert found.keys() == VARIABLES.keys()  # one list of names, documented
    return found
