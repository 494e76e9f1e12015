"""One proxied connection: a reader and an ordered outbox per direction, rules applied between.

Readers turn what arrives into items (TCP: chunks; Kafka: whole frames) stamped with the time
they may be written (now + the delays in force) and push them into the other side's outbox; a
drain per outbox writes the items in order, each once its time has come and no cut holds it.

Kafka ordering: a client matches responses to requests by order as well as correlation id, so
a response the proxy makes itself (kafka-error) must not overtake the broker's responses to
earlier requests on the connection. The connection counts the forwarded requests that will be
answered (``expected``) and the responses forwarded (``answered``); a made-up response waits
in ``held`` until ``answered`` reaches the ``expected`` of its moment. Every decision is taken
without an ``await`` in between, so the order in the outbox is the order on the wire.

Rewriting broker addresses (opt-in), the connection notes the correlation ids of the forwarded
requests whose responses name brokers, and rewrites those responses as they arrive, before
they join the outbox (``addresses``); the counting above is the same either way.

MongoDB: whole messages each way. A request an ack-lost rule takes is forwarded and its
requestID noted (``doomed``); the server's reply to it is not forwarded: a reset takes its place
in the client's outbox, so the replies queued before it still go out first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
from collections import deque

from harness.environment.proxy import kafka_messages as km
from harness.environment.proxy import mongo_messages as mm
from harness.environment.proxy.addresses import AddressBook, ResponseAddresses
from harness.environment.proxy.listener import ListenerSpec, ListenerStats
from harness.environment.proxy.rules import KAFKA, MONGO, RuleTable
from harness.kafka.protocol import api_name
from harness.kafka.wire import Malformed

log = logging.getLogger("chaoslab.proxy")

CHUNK = 64 * 1024
MAX_FRAME = 256 * 1024 * 1024  # larger than any request or response a lab client makes
OUTBOX_LIMIT = 8 * 1024 * 1024  # a reader waits while its outbox holds more than this
CONNECT_TIMEOUT_S = 5.0
RESET = b""  # in a client's outbox: reset the connection here instead of writing


class Outbox:
    """A FIFO of (write-at time, bytes) for one socket; ``None`` from ``get`` means "done"."""

    def __init__(self, limit: int = OUTBOX_LIMIT) -> None:
        self._items: deque[tuple[float, bytes] | None] = deque()
        self._size = 0
        self._limit = limit
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def push(self, data: bytes, due: float) -> None:
        self._items.append((due, data))
        self._size += len(data)
        self._readable.set()
        if self._size > self._limit:
            self._room.clear()

    def finish(self) -> None:
        self._items.append(None)
        self._readable.set()

    async def get(self) -> tuple[float, bytes] | None:
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        item = self._items.popleft()
        if item is not None:
            self._size -= len(item[1])
            if self._size <= self._limit:
                self._room.set()
        return item

    async def room(self) -> None:
        await self._room.wait()


class _Ended(Exception):
    """The connection is over (the reason is the message)."""


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """A whole Kafka frame, size prefix included; None at the end of the stream."""
    try:
        head = await reader.readexactly(4)
        size = int.from_bytes(head, "big", signed=True)
        if not 0 < size <= MAX_FRAME:
            raise Malformed(f"frame size {size}")
        return head + await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


class Connection:
    """A client connection accepted on a listener, and its connection to the upstream server."""

    def __init__(
        self,
        spec: ListenerSpec,
        rules: RuleTable,
        stats: ListenerStats,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        number: int,
        addresses: AddressBook | None = None,
    ) -> None:
        self.spec, self.rules, self.stats = spec, rules, stats
        self.client_reader, self.client_writer = client_reader, client_writer
        self.client = ""  # Kafka: the client.id of its first request
        peer = client_writer.get_extra_info("peername")
        self.label = f"{spec.name}#{number} (from port {peer[1] if peer else '?'})"
        self._upstream_writer: asyncio.StreamWriter | None = None
        self._reset = False
        self._closed = False
        self.refused = False  # the upstream server refused the connection: it is down
        self._identified = spec.mode != KAFKA
        self.expected = 0
        self.answered = 0
        self.held: deque[tuple[int, bytes]] = deque()
        # MongoDB: the requestIDs of the requests whose replies an ack-lost rule takes.
        self.doomed: dict[int, str] = {}
        # Rewriting broker addresses (``--rewrite-addresses``): the responses that name brokers.
        self.addresses = ResponseAddresses(addresses)
        self.to_upstream = Outbox()
        self.to_client = Outbox()

    # -- life -----------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            if self._reset_if_a_rule_says_so():
                return
            try:
                up_reader, self._upstream_writer = await asyncio.wait_for(
                    asyncio.open_connection(self.spec.upstream_host, self.spec.upstream_port),
                    CONNECT_TIMEOUT_S,
                )
            except (OSError, TimeoutError) as exc:
                # The server is down (a bounced broker): this client sees its connection close
                # and reconnects; the listener refuses the next ones (see ``ProxyServer``).
                log.info("%s: upstream %s unreachable (%s)", self.label, self.spec.upstream, exc)
                self.refused = isinstance(exc, ConnectionRefusedError)
                return
            if self._reset:  # reset while connecting
                return
            assert self._upstream_writer is not None  # connected above
            if self.spec.mode == KAFKA:
                requests, responses = self._read_requests(), self._read_responses(up_reader)
            elif self.spec.mode == MONGO:
                requests = self._read_mongo_requests()
                responses = self._read_mongo_replies(up_reader)
            else:
                requests = self._read_chunks(self.client_reader)
                responses = self._read_chunks(up_reader)
            readers = {asyncio.create_task(requests), asyncio.create_task(responses)}
            drains = {
                asyncio.create_task(self._drain(self.to_upstream, self._upstream_writer)),
                asyncio.create_task(self._drain(self.to_client, self.client_writer)),
            }
            await self._until_over(readers, drains)
        finally:
            self._close()

    async def _until_over(
        self, readers: set[asyncio.Task[None]], drains: set[asyncio.Task[None]]
    ) -> None:
        """Wait until a drain finishes (its stream ended) or any task fails."""
        tasks = pending = readers | drains
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.cancelled() or task in drains:
                        return
                    exc = task.exception()
                    if exc is not None:
                        self._log_end(exc)
                        return
        finally:
            for task in pending:
                task.cancel()
            # Every task's outcome collected, so none is reported as "never retrieved".
            await asyncio.gather(*tasks, return_exceptions=True)

    def _log_end(self, exc: BaseException) -> None:
        if isinstance(exc, Malformed | km.Unsupported):
            log.warning("%s: closing, malformed Kafka frame: %s", self.label, exc)
        elif isinstance(exc, mm.MalformedMessage):
            log.warning("%s: closing, malformed MongoDB message: %s", self.label, exc)
        elif isinstance(exc, _Ended | ConnectionError):
            log.debug("%s: %s", self.label, exc)
        else:
            log.error("%s: closing after an error", self.label, exc_info=exc)

    def reset(self) -> None:
        """Close both sides at once, the client's with a TCP RST (a reset rule)."""
        self._reset = True
        self._close()

    def _close(self) -> None:
        """Close whichever sockets are open (safe to call again, e.g. once upstream connects)."""
        if self._reset and not self._closed:
            sock = self.client_writer.get_extra_info("socket")
            # Linger 0: closing sends RST instead of FIN, as a middlebox resetting would.
            with contextlib.suppress(OSError, AttributeError):  # already gone: nothing to reset
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._closed = True
        for writer in (self.client_writer, self._upstream_writer):
            if writer is None or writer.transport.is_closing():
                continue
            if self._reset:
                writer.transport.abort()
            else:
                writer.close()

    def _reset_if_a_rule_says_so(self) -> bool:
        rules = self.rules.matching("reset", self.spec.name, self.client)
        if rules:
            self.rules.count(rules)
            log.info("%s: reset by rule %s", self.label, rules[0].id)
            self.reset()
        return bool(rules)

    # -- readers --------------------------------------------------------------------------------

    def _due(self) -> float:
        return asyncio.get_running_loop().time() + self.rules.delay_s(self.spec.name, self.client)

    def _end_of(self, outbox: Outbox) -> None:
        """One side closed: flush what is queued for the other, then end - unless a cut holds
        it, in which case the connection ends now (a partitioned peer would never see it)."""
        if self.rules.matching("cut", self.spec.name, self.client):
            raise _Ended("peer closed during a cut")
        outbox.finish()

    async def _read_chunks(self, reader: asyncio.StreamReader) -> None:
        outbox = self.to_upstream if reader is self.client_reader else self.to_client
        while True:
            await outbox.room()
            data = await reader.read(CHUNK)
            if not data:
                self._end_of(outbox)
                return
            outbox.push(data, self._due())

    async def _read_requests(self) -> None:
        while True:
            await self.to_upstream.room()
            frame = await read_frame(self.client_reader)
            if frame is None:
                self._end_of(self.to_upstream)
                return
            header = km.parse_request_header(frame[4:])
            if not self._identified:
                self._identified = True
                self.client = header.client_id
                self.label += f" {self.client!r}"
                if self._reset_if_a_rule_says_so():
                    raise _Ended("reset")
            self.stats.saw_request(self.spec.name, self.client, header.api_key, header.api_version)
            groups = functools.partial(km.group_ids, header, frame[4:])
            rule = self.rules.kafka_error(self.spec.name, self.client, header.api_key, groups)
            if rule is not None and km.can_answer(header):
                self._answer(km.error_response(header, frame[4:], rule.error_code))
                self.rules.count([rule])
                log.info(
                    "%s: answered %s v%d (correlation %d) with error %d (rule %s)",
                    self.label,
                    api_name(header.api_key),
                    header.api_version,
                    header.correlation_id,
                    rule.error_code,
                    rule.id,
                )
                continue
            if rule is not None:
                log.warning(
                    "%s: rule %s: cannot answer %s v%d itself; forwarded",
                    self.label,
                    rule.id,
                    api_name(header.api_key),
                    header.api_version,
                )
            if km.expects_response(header, frame[4:]):
                self.expected += 1
                self.addresses.forwarded(header)
            self.to_upstream.push(frame, self._due())

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        while True:
            await self.to_client.room()
            frame = await read_frame(reader)
            if frame is None:
                self._end_of(self.to_client)
                return
            frame = self.addresses.response(frame, self.label)
            self.to_client.push(frame, self._due())
            self.answered += 1
            while self.held and self.held[0][0] <= self.answered:
                self.to_client.push(self.held.popleft()[1], self._due())

    async def _read_mongo_requests(self) -> None:
        while True:
            await self.to_upstream.room()
            message = await mm.read_message(self.client_reader)
            if message is None:
                self._end_of(self.to_upstream)
                return
            # Read a command only while an ack-lost rule may want it.
            command = mm.command(message) if self.rules.has("ack-lost", self.spec.name) else None
            rule = None if command is None else self.rules.ack_lost(self.spec.name, command)
            if rule is not None:
                assert command is not None  # a rule takes only a command's reply
                self.doomed[mm.header(message).request_id] = rule.id
                log.info("%s: %s goes to the server; rule %s takes its reply",
                         self.label, command.name, rule.id)  # fmt: skip
            self.to_upstream.push(message, self._due())

    async def _read_mongo_replies(self, reader: asyncio.StreamReader) -> None:
        while True:
            await self.to_client.room()
            message = await mm.read_message(reader)
            if message is None:
                self._end_of(self.to_client)
                return
            rule_id = self.doomed.pop(mm.header(message).response_to, None)
            if rule_id is None:
                self.to_client.push(message, self._due())
                continue
            # The server applied the write and answered; the client gets a reset instead.
            self.rules.affected[rule_id] += 1
            log.info("%s: reply dropped and connection reset (rule %s)", self.label, rule_id)
            self.to_client.push(RESET, self._due())
            return

    def _answer(self, response: bytes) -> None:
        """Queue a made-up response behind the broker's answers to earlier requests."""
        if not self.held and self.answered >= self.expected:
            self.to_client.push(response, self._due())
        else:
            self.held.append((self.expected, response))

    # -- writers --------------------------------------------------------------------------------

    async def _drain(self, outbox: Outbox, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while (item := await outbox.get()) is not None:
            due, data = item
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            await self._through_cuts()
            if not data:  # RESET: nothing else is ever queued empty
                self.reset()
                return
            writer.write(data)
            await writer.drain()

    async def _through_cuts(self) -> None:
        """Return once no cut holds this connection (at once if none does)."""
        counted = False
        while cuts := self.rules.matching("cut", self.spec.name, self.client):
            if not counted:
                self.rules.count(cuts)
                counted = True
            await self.rules.changed()
