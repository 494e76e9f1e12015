"""The little of MongoDB's wire protocol the proxy reads: a message's frame and header, and of a
command (OP_MSG) its name and which write it is.

Every message starts with four little-endian int32s: its length (the header included), its
requestID, the requestID it answers (``responseTo``, 0 for a request) and its opCode. A command
is an OP_MSG (2013): flag bits, then sections - exactly one of kind 0, the command document,
whose first key names the command; kind 1 sections carry document sequences (an insert's
documents), which the proxy never reads. A retryable write carries its session (``lsid``) and a
``txnNumber``; the driver sends a retry with the same two, which is how the server knows it
already applied it (and how the proxy knows a retry when it sees one).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

import bson
from bson.errors import InvalidBSON

HEADER = struct.Struct("<iiii")
OP_MSG = 2013
MAX_MESSAGE = 64 * 1024 * 1024  # above MongoDB's maxMessageSizeBytes (48 MB)
_CHECKSUM_PRESENT = 1


class MalformedMessage(ValueError):
    """Bytes that are not a MongoDB message the proxy can frame or read."""


@dataclass(frozen=True)
class Header:
    length: int
    request_id: int
    response_to: int
    op_code: int


@dataclass(frozen=True)
class Command:
    """An OP_MSG command: its name, the database it names (``$db``), and its session and
    transaction number if it has them (a retryable write, a transaction's statement or commit:
    without them a retry cannot be told from a new write)."""

    name: str
    database: str
    session: bytes | None = None
    txn: int | None = None

    @property
    def write(self) -> tuple[str, bytes, int] | None:
        """Which write it is: a retry of it is the same (None: it cannot be told)."""
        if self.session is None or self.txn is None:
            return None
        return (self.name, self.session, self.txn)


def header(frame: bytes) -> Header:
    return Header(*HEADER.unpack_from(frame))


async def read_message(reader: asyncio.StreamReader) -> bytes | None:
    """A whole message, header included; None at the end of the stream."""
    try:
        head = await reader.readexactly(4)
        size = int.from_bytes(head, "little", signed=True)
        if not HEADER.size <= size <= MAX_MESSAGE:
            raise MalformedMessage(f"message length {size}")
        return head + await reader.readexactly(size - 4)
    except asyncio.IncompleteReadError:
        return None


def command(frame: bytes) -> Command | None:
    """The command an OP_MSG carries (None for another opCode: a legacy handshake, a compressed
    message)."""
    if header(frame).op_code != OP_MSG:
        return None
    try:
        return _sections(frame)
    except (struct.error, InvalidBSON) as exc:
        raise MalformedMessage(f"an OP_MSG that cannot be read: {exc}") from None


def _sections(frame: bytes) -> Command:
    (flags,) = struct.unpack_from("<I", frame, HEADER.size)
    end = len(frame) - (4 if flags & _CHECKSUM_PRESENT else 0)
    at = HEADER.size + 4
    while at < end:
        kind = frame[at]
        (size,) = struct.unpack_from("<i", frame, at + 1)
        if size < 5 or at + 1 + size > end:
            raise MalformedMessage(f"section of {size} bytes at {at}")
        if kind == 0:
            return _command(bson.decode(frame[at + 1 : at + 1 + size]))
        if kind != 1:
            raise MalformedMessage(f"section kind {kind}")
        at += 1 + size
    raise MalformedMessage("an OP_MSG without its command document")


def _command(doc: dict[str, object]) -> Command:
    if not doc:
        raise MalformedMessage("an empty command document")
    name = next(iter(doc))
    database = doc.get("$db")
    lsid, txn = doc.get("lsid"), doc.get("txnNumber")
    session = lsid.get("id") if isinstance(lsid, dict) else None
    return Command(
        name,
        database if isinstance(database, str) else "",
        bytes(session) if isinstance(session, bson.Binary) else None,
        txn if isinstance(txn, int) else None,
    )
