"""The shapes of bad records, as producers and CDC tools emit them: each turns a change event's
envelope into the bytes (or the null value) a broken upstream would send.

Two are the workload's default mix (``DEFAULT``) and stand alone: a cut-off document, and an
event that kept its ``event_id`` but lost the rest (its version 0, of no real change). The
others are a real change gone wrong on its way - a serializer bug, a schema change, a bad
deploy - so each carries a recent change's order and version (``derived``), and a sink that
keys on them may take it for that change:

* ``not-object`` - JSON that is not an object (the envelope in an array, a batch sent as one);
* ``missing-*`` - the event without one, several or all of the fields a sink keys on
  (``order_id``, ``version``, ``event_id``, ``payload.source.txId``, ``payload.after``);
* ``key-as-string``, ``key-as-float``, ``key-null`` - ``order_id`` as ``"17"``, ``17.0``, null;
* ``tombstone`` - a null value, as Debezium emits after each delete;
* ``oversize`` - over MongoDB's 16 MiB document limit (a blob in the row);
* ``new-field``, ``renamed-field`` - schema drift: a field added, ``order_id`` renamed;
* ``duplicate-keys`` - ``order_id`` twice, the second naming another order (JSON parsers keep
  the last);
* ``not-utf8`` - a status in Latin-1, bytes that are not UTF-8.

Every bad record that is a JSON object without an ``event_id`` keeps its identity in
``lab_trace`` - a field of the lab's that no sink keys on - so a document a sink made of it can
be traced back to it.
"""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from typing import Any

MONGO_DOCUMENT_LIMIT = 16 * 1024 * 1024  # MongoDB's largest BSON document
# An oversize record's blob: the document is over the limit by its row's few hundred bytes -
# under the 16 KiB more the Java driver lets a write's payload have, so the server refuses it
# (SecantusDB with mongod's 10334, BSONObjectTooLarge), where pymongo refuses it itself.
OVERSIZE_BLOB = MONGO_DOCUMENT_LIMIT
TRACE = "lab_trace"  # a bad record's event id, where its shape has none


class PoisonKind(StrEnum):
    MALFORMED_JSON = "malformed-json"
    MISSING_FIELDS = "missing-fields"
    NOT_OBJECT = "not-object"
    MISSING_ORDER_ID = "missing-order-id"
    MISSING_VERSION = "missing-version"
    MISSING_EVENT_ID = "missing-event-id"
    MISSING_TX_ID = "missing-tx-id"
    MISSING_AFTER = "missing-after"
    MISSING_KEYS = "missing-keys"  # order_id and version
    MISSING_ALL = "missing-all"  # every field a sink keys on
    KEY_AS_STRING = "key-as-string"
    KEY_AS_FLOAT = "key-as-float"
    KEY_NULL = "key-null"
    TOMBSTONE = "tombstone"
    OVERSIZE = "oversize"
    NEW_FIELD = "new-field"
    RENAMED_FIELD = "renamed-field"
    DUPLICATE_KEYS = "duplicate-keys"
    NOT_UTF8 = "not-utf8"


# The workload's mix unless a scenario names its shapes: the figures measured before the other
# shapes existed stand.
DEFAULT: tuple[PoisonKind, ...] = (PoisonKind.MALFORMED_JSON, PoisonKind.MISSING_FIELDS)

# The fields each missing-* shape drops: (top-level keys, payload keys, payload.source keys).
_MISSING: dict[PoisonKind, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    PoisonKind.MISSING_ORDER_ID: (("order_id",), (), ()),
    PoisonKind.MISSING_VERSION: (("version",), (), ()),
    PoisonKind.MISSING_EVENT_ID: (("event_id",), (), ()),
    PoisonKind.MISSING_TX_ID: ((), (), ("txId",)),
    PoisonKind.MISSING_AFTER: ((), ("after",), ()),
    PoisonKind.MISSING_KEYS: (("order_id", "version"), (), ()),
    PoisonKind.MISSING_ALL: (("order_id", "version", "event_id"), ("after",), ("txId",)),
}


def derived(shape: PoisonKind) -> bool:
    """Whether a bad record of ``shape`` is a real change gone wrong (its order and version a
    recent change's), not the default mix's record of no change."""
    return shape not in DEFAULT


def compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


def value(shape: PoisonKind, envelope: dict[str, Any], twin: int) -> bytes | None:
    """The bytes a record of ``shape`` carries, made from a change's ``envelope``; ``twin``:
    the other order a duplicate-keys record names."""
    doc = copy.deepcopy(envelope)
    payload = doc["payload"]
    match shape:
        case PoisonKind.MALFORMED_JSON:
            text = compact(doc)
            return text[: len(text) // 2].encode()  # cut mid-document
        case PoisonKind.MISSING_FIELDS:
            del doc["payload"], doc["order_id"]
        case PoisonKind.NOT_OBJECT:
            return compact([doc]).encode()
        case PoisonKind.TOMBSTONE:
            return None
        case PoisonKind.KEY_AS_STRING:
            doc["order_id"] = str(doc["order_id"])
        case PoisonKind.KEY_AS_FLOAT:
            doc["order_id"] = float(doc["order_id"])
        case PoisonKind.KEY_NULL:
            doc["order_id"] = None
        case PoisonKind.OVERSIZE:
            row = payload["after"] if payload.get("after") is not None else payload
            row["attachment"] = "x" * OVERSIZE_BLOB
        case PoisonKind.NEW_FIELD:
            doc["discount_cents"] = 250
            if payload.get("after") is not None:
                payload["after"]["discount_cents"] = 250
        case PoisonKind.RENAMED_FIELD:
            doc = {("orderId" if k == "order_id" else k): v for k, v in doc.items()}
        case PoisonKind.DUPLICATE_KEYS:
            text = compact(doc)
            return (text[:-1] + f',"order_id":{twin}}}').encode()
        case PoisonKind.NOT_UTF8:
            if payload.get("after") is not None:
                payload["after"]["status"] = "payé"
            else:
                doc["status"] = "payé"
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("latin-1")
        case _:
            top, inner, source = _MISSING[shape]
            for key in top:
                doc.pop(key, None)
            for key in inner:
                payload.pop(key, None)
            for key in source:
                payload["source"].pop(key, None)
    if "event_id" not in doc:
        doc[TRACE] = envelope["event_id"]
    return compact(doc).encode()
