"""The proxy's control API: small JSON over HTTP/1.1 on a loopback port, like Toxiproxy's.

    GET    /health         {"ok": true}
    GET    /rules          [rule, ...]            each with "affected"
    POST   /rules          rule -> 201 rule       with its "id"; 400 {"error": ...} if invalid
    DELETE /rules          {"removed": n}
    DELETE /rules/ID       {"removed": rule}      404 if there is no such rule
    GET    /stats          {"listeners": {...}, "rules": [...], "affected": {id: n}}

One request per connection (the response closes it). A rule is in force when its POST returns;
a reset rule has closed the matching connections by then.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import Any

from harness.environment.proxy.rules import RuleError
from harness.environment.proxy.server import ProxyServer

log = logging.getLogger("chaoslab.proxy")

MAX_BODY = 64 * 1024
READ_TIMEOUT_S = 10.0


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlApi:
    def __init__(self, proxy: ProxyServer) -> None:
        self.proxy = proxy

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, path, body = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT_S)
                status, payload = self.route(method, path, body)
            except _HttpError as exc:
                status, payload = exc.status, {"error": str(exc)}
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return
            except Exception as exc:  # never let a request take the proxy down
                log.exception("control API request failed")
                status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": repr(exc)}
            data = json.dumps(payload).encode()
            head = (
                f"HTTP/1.1 {status.value} {status.phrase}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + data)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def route(self, method: str, path: str, body: bytes) -> tuple[HTTPStatus, Any]:
        proxy = self.proxy
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        match method, parts:
            case "GET", ["health"]:
                return HTTPStatus.OK, {"ok": True}
            case "GET", ["stats"]:
                return HTTPStatus.OK, proxy.stats_json()
            case "GET", ["rules"]:
                return HTTPStatus.OK, [proxy.rule_json(r) for r in proxy.rules]
            case "POST", ["rules"]:
                try:
                    rule = proxy.add_rule(json.loads(body or b"null"))
                except (RuleError, ValueError) as exc:
                    raise _HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
                return HTTPStatus.CREATED, proxy.rule_json(rule)
            case "DELETE", ["rules"]:
                return HTTPStatus.OK, {"removed": proxy.clear_rules()}
            case "DELETE", ["rules", rule_id]:
                found = next((r for r in proxy.rules if r.id == rule_id), None)
                if found is None or not proxy.remove_rule(rule_id):
                    raise _HttpError(HTTPStatus.NOT_FOUND, f"no rule {rule_id!r}")
                return HTTPStatus.OK, {"removed": proxy.rule_json(found)}
        raise _HttpError(HTTPStatus.NOT_FOUND, f"no route {method} {path}")


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    line = (await reader.readline()).decode("latin-1").strip()
    try:
        method, path, _version = line.split(" ", 2)
    except ValueError:
        raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad request line {line!r}") from None
    length = 0
    while (header := (await reader.readline()).decode("latin-1").strip()) != "":
        name, _, value = header.partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise _HttpError(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
    if not 0 <= length <= MAX_BODY:
        raise _HttpError(HTTPStatus.BAD_REQUEST, f"body of {length} bytes")
    body = await reader.readexactly(length) if length else b""
    return method, path, body
