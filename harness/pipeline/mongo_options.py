"""The consumers' MongoDB client settings a scenario can set (``pipeline.mongo``), over the
drivers' defaults: a production consumer's timeouts and retry policy, not the lab's.

All but ``maxCommitTimeMS`` are connection-string options, so they reach every consumer through
its URI: the lab's listeners, Spark's executors, the outbox relays and a command consumer's
``CHAOSLAB_MONGO_URI`` alike. ``maxCommitTimeMS`` is a transaction's option: the variants that
commit a transaction pass it on. A variant that sets its own write concern on an operation (the
transactional one: majority) keeps it over ``w``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from harness.records import Problem

# Connection-string options, each with what it must be.
URI_OPTIONS = (
    "retryWrites",
    "w",
    "wtimeoutMS",
    "socketTimeoutMS",
    "serverSelectionTimeoutMS",
    "connectTimeoutMS",
)
MAX_COMMIT = "maxCommitTimeMS"
OPTIONS = (*URI_OPTIONS, MAX_COMMIT)


def problems(options: Mapping[str, Any]) -> list[Problem]:
    """(field, what is wrong) for every setting that is unknown or of the wrong kind."""
    found: list[Problem] = []
    for key, value in options.items():
        where = f"mongo.{key}"
        if key not in OPTIONS:
            found.append((where, f"unknown MongoDB client setting (known: {', '.join(OPTIONS)})"))
        elif key == "retryWrites":
            if not isinstance(value, bool):
                found.append((where, f"true or false, got {value!r}"))
        elif key == "w":
            if not (value == "majority" or (isinstance(value, int) and value >= 0)):
                found.append((where, f"a number of nodes or 'majority', got {value!r}"))
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            found.append((where, f"milliseconds, a whole number >= 0, got {value!r}"))
    return found


def uri_with(uri: str, options: Mapping[str, Any]) -> str:
    """``uri`` with the connection-string settings of ``options`` (replacing any it had)."""
    settings = {k: v for k, v in options.items() if k in URI_OPTIONS}
    if not settings:
        return uri
    parts = urlsplit(uri)
    lowered = {k.lower() for k in settings}
    query = [(k, v) for k, v in parse_qsl(parts.query) if k.lower() not in lowered]
    query += [(k, text(v)) for k, v in settings.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def text(value: Any) -> str:
    """A setting as a connection string writes it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def max_commit_time_ms(options: Mapping[str, Any]) -> int | None:
    """A transaction's commit deadline, if the scenario sets one (else the server's default)."""
    value = options.get(MAX_COMMIT)
    return int(value) if value is not None else None
