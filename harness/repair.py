"""Post-mortem repair: delete the duplicates an at-least-once bug left, then add the unique index.

Seed 002's cleanup ("10. The Fix and the Cleanup"), automated: for each key held by more than
one document keep one (the earliest ``created_at`` by default) and delete the rest, then build
the unique index on the key, so the database refuses the next bug of that shape. The order is
forced: the index build fails while duplicates exist.

    chaoslab repair --uri URI --db D --collection C --key K [--keep earliest|latest]
        [--by FIELD] [--dry-run] [--replace-index]

Decisions:

* Grouping is done by the server (``$group``, ``allowDiskUse``) with MongoDB's own equality,
  the one the unique index applies (1 and 1.0 are one key, strings compare binary).
* Documents lacking a key field are no copy of anything: they are counted, not grouped, and
  left alone. A plain unique index would index each of them as null and the second one would
  fail the build, so when there are any the index is built partial, over the documents that
  have every key field (``{field: {$exists: true}}``), and the report says so. An explicit
  null is a value: such documents are grouped and indexed.
* The copy kept has the smallest ``--by`` value (``earliest``) or the largest (``latest``);
  ties go to the smaller ``_id`` for earliest, the larger for latest (with ObjectIds: the
  first, resp. last, inserted). The comparison is made here and refuses rather than guesses:
  if a document of a duplicate group has no ``--by`` value (missing or null), or a group's
  values mix types (a date and a string) or have no order (objects, arrays, NaN), nothing is
  changed and the error (exit 2) names an example ``_id``.
* Every check runs and the whole plan is made before the first delete, so a refusal changes
  nothing. Deletes go in batches (``_id: {$in: ...}``); kept documents are never deleted and
  the choice is deterministic, so an interrupted run is finished by running it again.
* An existing unique index over exactly the key's fields (any order or direction; partial
  only with the ``$exists`` filter above) is the index: nothing is built. An index with the
  key pattern this tool would build that does not enforce uniqueness (non-unique, or partial
  on another filter) is a conflict: MongoDB will not hold two indexes with one key pattern,
  and dropping one that queries may rely on is not done unasked. So the run is refused
  (exit 2, nothing changed) unless ``--replace-index`` is given; then, after the dedup, the
  old index is dropped and the unique one built (the old one is rebuilt if that fails).
* Writers should be stopped or fixed first: a duplicate written between the scan and the
  build fails the build (exit 1; run again).

Exit codes: 0 done (or dry run), 1 the index could not be built or MongoDB failed, 2 bad input
(unknown database or collection, bad key or ``--by``, the refusals above), nothing changed.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import bson
from bson import Decimal128, ObjectId, Timestamp
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.errors import ConfigurationError, InvalidName, OperationFailure, PyMongoError

from harness.console import say
from harness.errors import BadInput, LabError

KEEP_CHOICES = ("earliest", "latest")
DEFAULT_BY = "created_at"
SAMPLE_GROUPS = 5
DELETE_BATCH = 1000


@dataclass(frozen=True)
class KeptGroup:
    """One duplicate group: its key, the document kept and the ones removed."""

    key: dict[str, Any]
    kept_id: Any
    kept_by: Any
    removed_ids: list[Any]


@dataclass
class RepairReport:
    """What a repair found and did (or, with ``dry_run``, would do)."""

    database: str
    collection: str
    key: tuple[str, ...]
    keep: str
    by: str
    dry_run: bool
    documents_before: int
    documents_after: int  # with dry_run: what the run would leave
    missing_key: int  # documents lacking a key field: not grouped, left alone
    groups: int  # keys held by more than one document
    documents_in_groups: int
    copies: dict[int, int]  # copies per key -> how many keys, e.g. {2: 20, 3: 10}
    duplicates_removed: int  # with dry_run: would be removed
    kept: list[KeptGroup]  # the first few groups, in key order
    index_name: str
    index_status: str  # created | exists | replaced | would create | would replace
    index_created: bool
    index_partial: bool  # unique over the documents that have every key field
    index_replaced: str | None = None  # the index dropped (dry run: to drop) for it
    index_key: dict[str, Any] = field(default_factory=dict)


def parse_key(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"order_id,version"`` (or a sequence of fields) as validated field paths."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    fields = tuple(p.strip() for p in parts)
    if not any(fields):
        raise BadInput("--key is empty: name the field(s) that identify a document, e.g. order_id")
    for f in fields:
        _check_path(f, "--key")
    repeated = [f for f, n in Counter(fields).items() if n > 1]
    if repeated:
        raise BadInput(f"--key names {repeated[0]!r} twice")
    return fields


def _check_path(path: str, option: str) -> None:
    if not path:
        raise BadInput(f"{option} has an empty field name")
    if path.startswith("$") or any(not seg or seg.startswith("$") for seg in path.split(".")):
        raise BadInput(f"{option}: {path!r} is not a field path (like created_at or _lab.at)")


def _check_target(coll: Collection[Any]) -> None:
    """Refuse an unknown database or collection. Reads only: nothing gets created."""
    db = coll.database
    names = db.list_collection_names()
    if not names:
        raise BadInput(f"database {db.name!r} not found (it has no collections); nothing changed")
    if coll.name not in names:
        shown = ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "")
        raise BadInput(
            f"collection {coll.name!r} not found in database {db.name!r} (it has: {shown}); "
            "nothing changed"
        )
    info = next(iter(db.list_collections(filter={"name": coll.name})), {})
    kind = info.get("type", "collection")
    if kind != "collection":
        raise BadInput(f"{db.name}.{coll.name} is a {kind}, not a collection; nothing changed")


# -- ordering the --by values -------------------------------------------------------------------

# BSON's order of types, for the types whose values have an order here.
_RANK = {"number": 2, "string": 3, "objectId": 7, "bool": 8, "date": 9, "timestamp": 10}


def _orderable(value: Any) -> tuple[str, Any] | None:
    """(type, comparable value), or None if the value has no order we would trust."""
    if isinstance(value, bool):  # before int: bool is an int in Python, not in BSON
        return "bool", value
    if isinstance(value, int | float):
        return None if isinstance(value, float) and math.isnan(value) else ("number", value)
    if isinstance(value, Decimal128):
        d = value.to_decimal()
        return None if d.is_nan() else ("number", d)
    if isinstance(value, Decimal):
        return None if value.is_nan() else ("number", value)
    if isinstance(value, str):
        return "string", value  # code point order is UTF-8 byte order, MongoDB's
    if isinstance(value, datetime):
        return "date", value
    if isinstance(value, ObjectId):
        return "objectId", value
    if isinstance(value, Timestamp):
        return "timestamp", value
    return None


def _id_order(value: Any) -> tuple[int, Any]:
    """A total order over _id values, for breaking ties: BSON's for the usual types, else by
    their encoding (arbitrary but stable, which is all a tie-break needs)."""
    found = _orderable(value)
    if found is not None:
        return _RANK[found[0]], found[1]
    return 99, bson.encode({"v": value})


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _show_key(key: dict[str, Any]) -> str:
    return ", ".join(f"{f}={_show(v)}" for f, v in key.items())


# -- the plan -----------------------------------------------------------------------------------


@dataclass
class _Plan:
    groups: int = 0
    in_groups: int = 0
    copies: Counter[int] = field(default_factory=Counter)
    remove: list[Any] = field(default_factory=list)
    kept: list[KeptGroup] = field(default_factory=list)


def _exists_filter(key: Sequence[str]) -> dict[str, Any]:
    return {f: {"$exists": True} for f in key}


def _choose(
    docs: list[dict[str, Any]], keep: str, by: str, keyval: dict[str, Any]
) -> tuple[dict[str, Any], list[Any]]:
    """The copy of a group to keep, and the _ids of the others."""
    ranked = []
    for d in docs:
        found = _orderable(d["by"])
        if found is None:
            raise BadInput(
                f"the duplicates of {_show_key(keyval)} have a {by} value that has no order "
                f"({_show(d['by'])}, _id {_show(d['_id'])}): cannot tell which is {keep}; "
                "nothing changed"
            )
        ranked.append((found, _id_order(d["_id"]), d))
    kinds = sorted({kind for (kind, _), _, _ in ranked})
    if len(kinds) > 1:
        raise BadInput(
            f"the duplicates of {_show_key(keyval)} have {by} values of different types "
            f"({', '.join(kinds)}), e.g. _id {_show(docs[0]['_id'])}: cannot tell which is "
            f"{keep}; nothing changed"
        )
    ranked.sort(key=lambda r: (r[0][1], r[1]))
    chosen = ranked[0][2] if keep == "earliest" else ranked[-1][2]
    return chosen, [d["_id"] for _, _, d in ranked if d is not chosen]


def _plan(coll: Collection[Any], key: Sequence[str], keep: str, by: str, sample: int) -> _Plan:
    # Group ids use positional names: a dotted path cannot be a field name in $group's _id.
    group_id = {f"k{i}": f"${f}" for i, f in enumerate(key)}
    pipeline = [
        {"$match": _exists_filter(key)},
        {
            "$group": {
                "_id": group_id,
                "n": {"$sum": 1},
                "docs": {"$push": {"_id": "$_id", "by": f"${by}"}},
            }
        },
        {"$match": {"n": {"$gt": 1}}},
        {"$sort": {"_id": 1}},  # so the sample and the plan do not change between runs
    ]
    plan = _Plan()
    no_by: list[Any] = []
    for group in coll.aggregate(pipeline, allowDiskUse=True):
        docs = group["docs"]
        keyval = {f: group["_id"].get(f"k{i}") for i, f in enumerate(key)}
        plan.groups += 1
        plan.in_groups += len(docs)
        plan.copies[len(docs)] += 1
        # A missing field is left out of $push's document; null is no better to order by.
        lacking = [d["_id"] for d in docs if d.get("by") is None]
        if lacking:
            no_by.extend(lacking)
            continue
        if no_by:
            continue  # the run is refused below; only count the rest
        chosen, removed = _choose(docs, keep, by, keyval)
        plan.remove.extend(removed)
        if len(plan.kept) < sample:
            plan.kept.append(KeptGroup(keyval, chosen["_id"], chosen["by"], removed))
    if no_by:
        raise BadInput(
            f"{len(no_by)} document(s) of duplicate groups have no {by} (missing or null), "
            f"e.g. _id {_show(no_by[0])}: cannot tell which copy is {keep}; nothing changed. "
            f"Order by a field every copy has (--by), or fix those documents first"
        )
    return plan


# -- the index ----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _existing_indexes(
    coll: Collection[Any], key: Sequence[str], name: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(a unique index over the key, an index in the way of building one)."""
    pattern = [(f, 1) for f in key]
    accepted = None
    conflict = None
    for ix in coll.list_indexes():
        ix = _plain(dict(ix))
        spec = list(ix["key"].items())
        fields = [f for f, _ in spec]
        directional = all(
            isinstance(d, int | float) and not isinstance(d, bool) and d in (1, -1) for _, d in spec
        )
        same_fields = directional and sorted(fields) == sorted(key)
        # _id_ is unique without saying so in list_indexes.
        unique = bool(ix.get("unique")) or ix["name"] == "_id_"
        partial = ix.get("partialFilterExpression")
        covers = partial is None or partial == _exists_filter(key)
        if same_fields and unique and covers:
            accepted = accepted or ix
        elif same_fields and [(f, int(d)) for f, d in spec] == pattern:
            conflict = ix
        elif ix["name"] == name:
            raise BadInput(
                f"an index named {name} already exists on {ix['key']}, not on the key; "
                "nothing changed"
            )
    return accepted, conflict


def _describe(ix: dict[str, Any]) -> str:
    what = "unique, partial on " + str(ix["partialFilterExpression"]) if ix.get("unique") else ""
    return f"{ix['name']} ({what or 'not unique'})"


def _build_index(
    coll: Collection[Any],
    key: Sequence[str],
    name: str,
    partial: bool,
    replace: dict[str, Any] | None,
    removed: int,
) -> None:
    where = f"{coll.database.name}.{coll.name}"
    options: dict[str, Any] = {"unique": True, "name": name}
    if partial:
        options["partialFilterExpression"] = _exists_filter(key)
    if replace is not None:
        coll.drop_index(replace["name"])
    try:
        coll.create_index([(f, 1) for f in key], **options)
    except OperationFailure as exc:
        restored = ""
        if replace is not None:
            # Put back what was dropped so queries keep their index; best effort.
            old = {k: v for k, v in replace.items() if k not in ("v", "key", "ns")}
            try:
                coll.create_index(list(replace["key"].items()), **old)
                restored = f"; the index {replace['name']} it replaces was rebuilt"
            except PyMongoError as again:
                restored = (
                    f"; rebuilding the index {replace['name']} it replaced failed too: {again}"
                )
        message = str(exc.details.get("errmsg", exc)) if exc.details else str(exc)
        raise LabError(
            f"could not build the unique index {name} on {where}: {message}{restored}. "
            f"{removed} duplicate(s) were removed; if writers still run, stop them and run again"
        ) from exc
    found = next((ix for ix in coll.list_indexes() if ix["name"] == name), None)
    if found is None or not found.get("unique") or list(found["key"]) != list(key):
        raise LabError(f"the unique index {name} on {where} is not there after building it")


# -- the repair ---------------------------------------------------------------------------------


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def repair(
    collection: Collection[Any],
    key_fields: str | Sequence[str],
    keep: str = "earliest",
    by: str = DEFAULT_BY,
    dry_run: bool = False,
    *,
    replace_index: bool = False,
    sample: int = SAMPLE_GROUPS,
    batch_size: int = DELETE_BATCH,
) -> RepairReport:
    """Deduplicate ``collection`` on ``key_fields``, then build and verify the unique index.

    Raises ``BadInput`` (nothing changed) for an unknown database or collection, a bad key,
    ``keep`` or ``by``, copies that cannot be ordered by ``by``, or an index in the way (see
    the module's notes); ``LabError`` if the index cannot be built.
    """
    key = parse_key(key_fields)
    _check_path(by, "--by")
    if keep not in KEEP_CHOICES:
        raise BadInput(f"--keep must be one of {', '.join(KEEP_CHOICES)}, got {keep!r}")
    _check_target(collection)

    name = "_".join(f"{f}_1" for f in key)  # MongoDB's own default name for the pattern
    missing = collection.count_documents({"$or": [{f: {"$exists": False}} for f in key]})
    accepted, conflict = _existing_indexes(collection, key, name)
    if accepted is None and conflict is not None and not replace_index:
        raise BadInput(
            f"index {_describe(conflict)} is on the key but does not make it unique, and "
            f"MongoDB holds one index per key pattern; nothing changed. Run with "
            f"--replace-index to drop it and build the unique one after the dedup"
        )
    replace = conflict if accepted is None else None

    before = collection.count_documents({})
    plan = _plan(collection, key, keep, by, sample)

    removed = 0
    if dry_run:
        removed = len(plan.remove)
    else:
        for chunk in _chunks(plan.remove, batch_size):
            removed += collection.delete_many({"_id": {"$in": chunk}}).deleted_count

    partial = missing > 0
    if accepted is not None:
        status, index_name = "exists", accepted["name"]
        partial = accepted.get("partialFilterExpression") is not None
        index_key = dict(accepted["key"])
    else:
        index_name, index_key = name, {f: 1 for f in key}
        if dry_run:
            status = "would replace" if replace else "would create"
        else:
            _build_index(collection, key, name, partial, replace, removed)
            status = "replaced" if replace else "created"

    return RepairReport(
        database=collection.database.name,
        collection=collection.name,
        key=key,
        keep=keep,
        by=by,
        dry_run=dry_run,
        documents_before=before,
        documents_after=before - removed if dry_run else collection.count_documents({}),
        missing_key=missing,
        groups=plan.groups,
        documents_in_groups=plan.in_groups,
        copies=dict(sorted(plan.copies.items())),
        duplicates_removed=removed,
        kept=plan.kept,
        index_name=index_name,
        index_status=status,
        index_created=status in ("created", "replaced"),
        index_partial=partial,
        index_replaced=replace["name"] if replace is not None else None,
        index_key=index_key,
    )


def render(report: RepairReport) -> str:
    """The report as the lines the CLI prints."""
    r = report
    would = "would be " if r.dry_run else ""
    lines = []
    if r.dry_run:
        lines.append("dry run: nothing is changed")
    lines.append(
        f"repair {r.database}.{r.collection} on key ({', '.join(r.key)}): keep the {r.keep} "
        f"{r.by} of each group (ties: the {'smaller' if r.keep == 'earliest' else 'larger'} _id)"
    )
    if r.missing_key:
        lines.append(f"documents missing a key field: {r.missing_key} (not grouped, left alone)")
    copies = ", ".join(f"{n} with {c} copies" for c, n in r.copies.items())
    lines.append(
        f"duplicate groups: {r.groups}"
        + (f" ({copies}; {r.documents_in_groups} documents)" if r.groups else "")
    )
    for g in r.kept:
        removed = ", ".join(_show(i) for i in g.removed_ids)
        lines.append(
            f"  {_show_key(g.key)}: {'would keep' if r.dry_run else 'kept'} {_show(g.kept_id)} "
            f"({r.by} {_show(g.kept_by)}), {would}removed {removed}"
        )
    if r.groups > len(r.kept):
        lines.append(f"  ... and {r.groups - len(r.kept)} more group(s)")
    lines.append(f"{'would remove' if r.dry_run else 'removed'}: {r.duplicates_removed}")
    lines.append(
        f"documents: {r.documents_before} before, {r.documents_after} after"
        + (" (if applied)" if r.dry_run else "")
    )
    scope = " (partial: over documents that have every key field)" if r.index_partial else ""
    replaced = f", replacing index {r.index_replaced}" if r.index_replaced else ""
    status = {
        "exists": f"unique index {r.index_name} already exists{scope}",
        "created": f"created unique index {r.index_name}{scope}, verified",
        "replaced": f"created unique index {r.index_name}{scope}{replaced}, verified",
        "would create": f"would create unique index {r.index_name}{scope}",
        "would replace": f"would drop index {r.index_replaced} and create unique index "
        f"{r.index_name}{scope}",
    }[r.index_status]
    lines.append(f"index: {status}")
    return "\n".join(lines)


# -- the command --------------------------------------------------------------------------------


def cmd_repair(args: argparse.Namespace) -> int:
    """``chaoslab repair``: raises LabError/BadInput for the caller to turn into an exit code."""
    key = parse_key(args.key)  # before connecting: bad input costs nothing
    _check_path(args.by, "--by")
    for option, value in (("--db", args.db), ("--collection", args.collection)):
        if not value.strip():
            raise BadInput(f"{option} is empty")
    try:
        c: MongoClient[dict[str, Any]] = MongoClient(
            args.uri, serverSelectionTimeoutMS=10_000, appname="chaoslab-repair"
        )
        with c:
            report = repair(
                c[args.db][args.collection],
                key,
                args.keep,
                args.by,
                args.dry_run,
                replace_index=args.replace_index,
            )
    except (ConfigurationError, InvalidName) as exc:  # a bad URI, database or collection name
        raise BadInput(str(exc)) from exc
    except LabError:
        raise
    except PyMongoError as exc:
        raise LabError(f"MongoDB: {exc}") from exc
    say(render(report))
    return 0


def add_repair_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``repair`` on a ``chaoslab`` parser's subcommands."""
    p = subparsers.add_parser(
        "repair",
        help="delete duplicates by key (keep one per group), then build the unique index",
        description=(
            "Post-mortem cleanup: report the documents sharing a key, delete all but one of "
            "each group, then build and verify the unique index on the key. Safe to re-run."
        ),
    )
    p.add_argument("--uri", required=True, help="MongoDB connection string")
    p.add_argument("--db", required=True, help="database")
    p.add_argument("--collection", required=True, help="collection")
    p.add_argument(
        "--key",
        required=True,
        help="the field(s) a document must be unique by: one, or comma-separated "
        "(order_id,version); dotted paths allowed",
    )
    p.add_argument(
        "--keep",
        choices=KEEP_CHOICES,
        default="earliest",
        help="which copy of each group survives: the smallest --by value (default) or largest",
    )
    p.add_argument(
        "--by",
        default=DEFAULT_BY,
        metavar="FIELD",
        help=f"the field that orders copies (default: {DEFAULT_BY}); dotted paths allowed",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="report what would be done; change nothing"
    )
    p.add_argument(
        "--replace-index",
        action="store_true",
        help="if a non-unique index on the key exists, drop it and build the unique one",
    )
    p.set_defaults(handler=cmd_repair)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chaoslab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_repair_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.repair repair ...``: the ``repair`` subcommand on its own."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    handler: Callable[[argparse.Namespace], int] = args.handler  # set by the subcommand
    try:
        return handler(args)
    except LabError as exc:
        print(f"chaoslab: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
