"""The fault proxy: sits on the environment's links and breaks them on request.

Run as its own supervised process (``python -m harness.environment.proxy``, see ``__main__``),
it forwards each listener's connections to an upstream server and applies the rules in force
(``rules``): cut, reset, delay, and - on Kafka listeners, which parse the protocol's framing -
answering chosen requests with an error code instead of forwarding them (``kafka_messages``).
The harness drives it through a small JSON-over-HTTP control API (``control``, ``client``).

Only ``client`` is imported by the harness; the rest runs inside the proxy process.
"""

from harness.environment.proxy.client import ProxyControl, ProxyError, RuleRejected, UnknownRule

__all__ = ["ProxyControl", "ProxyError", "RuleRejected", "UnknownRule"]
