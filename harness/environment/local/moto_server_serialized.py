"""moto's S3 server, answering one request at a time.

Why not ``moto_server``: its S3 backend is not safe under concurrent writes to one key. Two
PUTs of the same object race and one answers 500 ("I/O operation on closed file") after the
object may already have been replaced. Tansu makes exactly such writes - conditional PUTs of
``meta.json`` from concurrent produce requests of an idempotent producer - and after one of
these 500s it acknowledged records it never stored (seen here: 805 acked records of a partition
missing, its high watermark stuck at 0). ``moto_server`` has no option to serialise requests,
so this runs the same application behind a lock. Connections are still served on threads, so
keep-alive clients do not block each other between requests.

    python -m harness.environment.local.moto_server_serialized -H 127.0.0.1 -p PORT
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.core.serialize import TimestampSerializer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Serialized:
    """A WSGI middleware running each request to completion, body included, under one lock
    (a streamed body would otherwise read an object another request may be replacing)."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                body = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


def cache_timestamps() -> None:
    """Remember how each object's timestamp was rendered.

    Tansu finds a partition's segments with a LIST on every fetch, and moto spends half of a
    LIST re-parsing each key's last-modified time with dateutil (58 ms for 300 keys here, the
    broker's throughput limit once a topic has a few hundred segments). The rendering is a pure
    function of the value and the format, and an object's time never changes.
    """
    original = TimestampSerializer._convert_timestamp_to_str
    renderer = TimestampSerializer(TimestampSerializer.TIMESTAMP_FORMAT_ISO8601)

    @functools.lru_cache(maxsize=1 << 16)
    def render(value: Any, timestamp_format: str) -> str:
        return original(renderer, value, timestamp_format)

    def convert(self: TimestampSerializer, value: Any, timestamp_format: str) -> str:
        try:
            return render(value, timestamp_format)
        except TypeError:  # an unhashable value: render it as moto does
            return original(self, value, timestamp_format)

    TimestampSerializer._convert_timestamp_to_str = convert  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="moto_server_serialized")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cache_timestamps()
    app = Serialized(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
