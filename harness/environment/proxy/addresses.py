"""Broker addresses in Kafka responses, rewritten to the proxy's own listeners (opt-in, the
proxy's ``--rewrite-addresses``).

A client learns where brokers are from three responses: Metadata (every broker), FindCoordinator
(a group's or a transaction's coordinator) and DescribeCluster (every broker, for admin
clients); after bootstrap it connects to the addresses they name. The lab's own brokers
advertise the proxy's listeners, so those responses already send clients back through the
proxy. A cluster the lab did not start advertises its own addresses: a client would connect to
them directly, around the proxy and every fault in force. With rewriting on, each address that
a Kafka listener forwards to becomes that listener's (127.0.0.1, port); an address no listener
forwards to is left as it is, and logged once.

Only the host and port fields change; every other byte of the response is copied as it came
(racks, tagged fields, topics: a layout is read only as far as its last address). Layouts
follow MetadataResponse.json, FindCoordinatorResponse.json and DescribeClusterResponse.json of
clients/src/main/resources/common/message in apache/kafka, as Kafka 4.3.1 ships them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from harness.environment.ports import LOOPBACK
from harness.environment.proxy import kafka_messages as km
from harness.environment.proxy.listener import ListenerSpec
from harness.environment.proxy.rules import KAFKA
from harness.kafka.protocol import ApiKey, api_name
from harness.kafka.wire import Malformed, Reader, Writer

log = logging.getLogger("chaoslab.proxy")

# The versions whose layouts are read here: every one Kafka 4.3.1 defines. Metadata v10-v13 and
# FindCoordinator v5-v6 change nothing before the last address (topic ids, a top-level error
# code after the topics, new error codes and key types).
REWRITE_VERSIONS: dict[int, range] = {
    ApiKey.METADATA: range(0, 14),
    ApiKey.FIND_COORDINATOR: range(0, 7),
    ApiKey.DESCRIBE_CLUSTER: range(0, 3),
}

Address = tuple[str, int]  # (host, port), the host lower-cased: host names ignore case


@dataclass(frozen=True)
class Endpoint:
    """A host field and the port field right after it, in a response frame."""

    start: int  # offset of the host string in the frame
    end: int  # offset just after the port
    host: str
    port: int


def _endpoint(r: Reader, *, compact: bool) -> Endpoint:
    start = r.offset
    host = r.string(compact=compact)
    port = r.int32()
    return Endpoint(start, r.offset, host, port)


def metadata_endpoints(r: Reader, version: int) -> list[Endpoint]:
    """The brokers of a Metadata response body; reads no further than the broker list."""
    c = version >= 9
    if version >= 3:
        r.int32()  # throttle time

    def broker() -> Endpoint:
        r.int32()  # node id
        endpoint = _endpoint(r, compact=c)
        if version >= 1:
            r.nullable_string(compact=c)  # rack
        if c:
            r.skip_tagged_fields()
        return endpoint

    return r.array(broker, compact=c)


def find_coordinator_endpoints(r: Reader, version: int) -> list[Endpoint]:
    """The coordinator of a FindCoordinator response body (one per key from v4); an error names
    no node: node -1, host '', port -1. Reads the whole body."""
    c = version >= 3
    if version >= 1:
        r.int32()  # throttle time
    if version <= 3:
        r.int16()  # error code
        if version >= 1:
            r.nullable_string(compact=c)  # error message
        r.int32()  # node id
        endpoints = [_endpoint(r, compact=c)]
    else:

        def coordinator() -> Endpoint:
            r.string(compact=True)  # key
            r.int32()  # node id
            endpoint = _endpoint(r, compact=True)
            r.int16()  # error code
            r.nullable_string(compact=True)  # error message
            r.skip_tagged_fields()
            return endpoint

        endpoints = r.array(coordinator, compact=True)
    if c:
        r.skip_tagged_fields()
    # A body longer than its layout is not the version assumed: refuse rather than guess.
    if r.offset != len(r.data):
        raise Malformed(f"FindCoordinator v{version}: {len(r.data) - r.offset} bytes after it")
    return endpoints


def describe_cluster_endpoints(r: Reader, version: int) -> list[Endpoint]:
    """The brokers (or, for endpoint type 2, controllers) of a DescribeCluster response body,
    flexible in every version; reads no further than the broker list."""
    r.int32()  # throttle time
    r.int16()  # error code
    r.nullable_string(compact=True)  # error message
    if version >= 1:
        r.int8()  # endpoint type
    r.string(compact=True)  # cluster id
    r.int32()  # controller id

    def broker() -> Endpoint:
        r.int32()  # broker id
        endpoint = _endpoint(r, compact=True)
        r.nullable_string(compact=True)  # rack
        if version >= 2:
            r.int8()  # is fenced
        r.skip_tagged_fields()
        return endpoint

    return r.array(broker, compact=True)


ENDPOINTS: dict[int, Callable[[Reader, int], list[Endpoint]]] = {
    ApiKey.METADATA: metadata_endpoints,
    ApiKey.FIND_COORDINATOR: find_coordinator_endpoints,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster_endpoints,
}


@dataclass(frozen=True)
class Rewritten:
    frame: bytes  # the response to send on: ``frame`` itself when no address changed
    unknown: tuple[Address, ...]  # addresses it names that no listener forwards to


def rewrite_response(
    frame: bytes, api_key: int, version: int, ports: Mapping[Address, int]
) -> Rewritten:
    """``frame`` (a whole response, size included) to a request of ``api_key`` v``version``,
    each address in ``ports`` replaced by (127.0.0.1, its port). Raises ``Malformed`` (the
    connection then closes, as for any frame that does not decode) or ``Unsupported``."""
    if version not in REWRITE_VERSIONS.get(api_key, ()):
        raise km.Unsupported(f"no layout for {api_name(api_key)} v{version} responses")
    compact = km.is_flexible(api_key, version)
    r = Reader(frame, 8)  # after the size and the correlation id
    if compact:
        r.skip_tagged_fields()  # response header v1: copied as it came, like the rest
    endpoints = ENDPOINTS[api_key](r, version)
    parts: list[bytes] = []
    copied = 4  # the size prefix is written anew
    unknown: list[Address] = []
    for endpoint in endpoints:
        address = (endpoint.host.lower(), endpoint.port)
        port = ports.get(address)
        if port is None:
            if endpoint.host and endpoint.port >= 0:  # not the "no node" of an error
                unknown.append(address)
            continue
        parts.append(frame[copied : endpoint.start])
        parts.append(Writer().string(LOOPBACK, compact=compact).int32(port).bytes())
        copied = endpoint.end
    if not parts:
        return Rewritten(frame, tuple(unknown))
    parts.append(frame[copied:])
    payload = b"".join(parts)
    return Rewritten(len(payload).to_bytes(4, "big") + payload, tuple(unknown))


class AddressBook:
    """The proxy-wide map of upstream address -> listener port, and what it has warned about
    (each unknown address and unsupported version once: a client asks for metadata every few
    seconds)."""

    def __init__(self, ports: Mapping[Address, int]) -> None:
        self.ports = {(host.lower(), port): local for (host, port), local in ports.items()}
        self._warned: set[object] = set()

    @classmethod
    def for_listeners(cls, specs: Iterable[ListenerSpec]) -> AddressBook:
        """Each Kafka listener's upstream -> its port. Two listeners in front of one address
        would leave a rewrite no single answer: refused."""
        ports: dict[Address, int] = {}
        names: dict[Address, str] = {}
        for spec in specs:
            if spec.mode != KAFKA:
                continue
            address = (spec.upstream_host.lower(), spec.upstream_port)
            if address in names:
                raise ValueError(
                    f"listeners {names[address]} and {spec.name} both forward to "
                    f"{spec.upstream}: a rewritten address could name either"
                )
            names[address], ports[address] = spec.name, spec.port
        return cls(ports)

    def describe(self) -> str:
        return ", ".join(
            f"{host}:{port} -> {LOOPBACK}:{local}" for (host, port), local in self.ports.items()
        )

    def _warn_once(self, key: object, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    def tracks(self, api_key: int, version: int) -> bool:
        """Whether responses to this request are rewritten (a warning, once, if they name
        brokers in a version without a layout here: they go to the client unchanged)."""
        versions = REWRITE_VERSIONS.get(api_key)
        if versions is None:
            return False
        if version not in versions:
            self._warn_once(
                ("version", api_key, version),
                "cannot rewrite broker addresses in %s v%d responses: forwarded unchanged",
                api_name(api_key),
                version,
            )
            return False
        return True

    def rewrite(self, frame: bytes, api_key: int, version: int, label: str) -> bytes:
        result = rewrite_response(frame, api_key, version, self.ports)
        for host, port in result.unknown:
            self._warn_once(
                ("address", host, port),
                "%s: %s v%d names %s:%d, which no Kafka listener forwards to: left as it is "
                "(clients connect there directly, around the proxy)",
                label,
                api_name(api_key),
                version,
                host,
                port,
            )
        return result.frame


class ResponseAddresses:
    """One connection's part: which forwarded requests' responses name brokers (correlation id
    -> API key and version), and those responses rewritten. With no book (rewriting off) it
    records nothing and hands every response back as it came."""

    def __init__(self, book: AddressBook | None) -> None:
        self.book = book
        self.awaiting: dict[int, tuple[int, int]] = {}

    def forwarded(self, header: km.RequestHeader) -> None:
        if self.book is not None and self.book.tracks(header.api_key, header.api_version):
            self.awaiting[header.correlation_id] = (header.api_key, header.api_version)

    def response(self, frame: bytes, label: str) -> bytes:
        """``frame`` (a whole response) as the client gets it."""
        if self.book is None or not self.awaiting:
            return frame
        request = self.awaiting.pop(int.from_bytes(frame[4:8], "big", signed=True), None)
        if request is None:
            return frame
        return self.book.rewrite(frame, *request, label)
