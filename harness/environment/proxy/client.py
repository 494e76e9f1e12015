"""Talking to a running proxy's control API (see ``control`` for the routes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import requests

from harness.errors import BadInput, LabError


class ProxyError(LabError):
    """The proxy did not answer, or answered with an error it should not have."""


class RuleRejected(BadInput):
    """The proxy refused a rule (the message says which field and why)."""


class UnknownRule(BadInput):
    """There is no rule with that id (never added, or removed already)."""


class ProxyControl:
    def __init__(self, host: str, port: int, *, timeout: float = 10.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            response = requests.request(
                method, f"http://{self.host}:{self.port}{path}", json=body, timeout=self.timeout
            )
            payload = response.json() if response.content else None
        except (requests.RequestException, ValueError) as exc:
            raise ProxyError(
                f"the fault proxy's control API at {self.host}:{self.port} did not answer "
                f"{method} {path}: {exc}"
            ) from exc
        if response.status_code >= 500:
            raise ProxyError(f"the fault proxy failed {method} {path}: {payload}")
        return response.status_code, payload

    def health(self) -> None:
        """Return if the proxy answers; raise ``ProxyError`` otherwise."""
        self._call("GET", "/health")

    def add_rule(
        self,
        listener: str,
        action: str,
        *,
        clients: str = "",
        delay_ms: int = 0,
        api_keys: Sequence[int] = (),
        error_code: int = 0,
        group_prefix: str = "",
        commands: Sequence[str] = (),
        every: int = 1,
        times: int = 0,
    ) -> str:
        """Put a rule in force; returns its id."""
        rule: dict[str, Any] = {"listener": listener, "action": action, "clients": clients}
        if delay_ms:
            rule["delay_ms"] = delay_ms
        if api_keys:
            rule["api_keys"] = list(api_keys)
        if error_code:
            rule["error_code"] = error_code
        if group_prefix:
            rule["group_prefix"] = group_prefix
        if commands:
            rule["commands"] = list(commands)
        if every != 1:
            rule["every"] = every
        if times:
            rule["times"] = times
        status, payload = self._call("POST", "/rules", rule)
        if status != 201:
            raise RuleRejected(f"the fault proxy refused the rule {rule}: {payload['error']}")
        return str(payload["id"])

    def remove_rule(self, rule_id: str) -> int:
        """Lift a rule; returns how many times it acted (requests, chunks or connections)."""
        status, payload = self._call("DELETE", f"/rules/{quote(rule_id, safe='')}")
        if status == 404:
            raise UnknownRule(f"the fault proxy has no rule {rule_id!r}")
        return int(payload["removed"]["affected"])

    def clear_rules(self) -> int:
        """Lift every rule; returns how many there were."""
        return int(self._call("DELETE", "/rules")[1]["removed"])

    def rules(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/rules")[1])

    def stats(self) -> dict[str, Any]:
        return dict(self._call("GET", "/stats")[1])

    def affected(self, rule_id: str) -> int:
        """How many times a rule acted so far (it may have been removed since)."""
        return int(self.stats()["affected"].get(rule_id, 0))
