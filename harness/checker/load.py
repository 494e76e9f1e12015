"""Loading a ledger file into columns quickly: pyarrow's multithreaded CSV reader instead of
csv + LedgerRow (many times faster on a large ledger: docs/performance.md)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from harness.workload.ledger import COLUMNS

from .model import KIND_NAMES, LedgerArrays, require_one_topic

# The columns the checker keeps, typed as LedgerArrays wants them.
_TYPES = {
    "order_id": pa.int64(),
    "version": pa.int64(),
    # Dictionary-encoded: a few distinct values over millions of rows, where plain strings
    # would be a large share of a ledger's memory (docs/performance.md).
    "kind": pa.dictionary(pa.int32(), pa.string()),
    "topic": pa.dictionary(pa.int32(), pa.string()),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "acked_at": pa.float64(),
}
_NUMPY: dict[str, type[np.generic]] = {
    "order_id": np.int64,
    "version": np.int64,
    "partition": np.int32,
    "offset": np.int64,
    "acked_at": np.float64,
}
# Kind names in code order, so that a name's index in this list is its code.
_KIND_VALUES = pa.array([KIND_NAMES[code].value for code in sorted(KIND_NAMES)])


def load_ledger(path: Path | str, *, topic: str | None = None) -> LedgerArrays:
    """Load a ledger file written by ``LedgerWriter``, fast (a million rows in ~a second).

    Rows are kept exactly as ``read_ledger`` keeps them: a line without all the columns
    (such as a torn last line from a crash) is not a row. With ``topic`` only that topic's
    rows are kept; without it, a ledger holding several topics is refused.
    """
    return LedgerArrays(**read_ledger_columns(Path(path), topic=topic))


def read_ledger_columns(path: Path, *, topic: str | None = None) -> dict[str, np.ndarray]:
    """The `LedgerArrays` columns of the ledger file at `path`.

    Keeps the rows ``harness.workload.ledger.read_ledger`` keeps: a line whose number of
    fields is not the number of columns - such as a torn last line from a crash - is not a
    row. A row with all its fields but an empty or unreadable value is an error, as it is for
    read_ledger.
    """
    if not _has_header(path):  # an empty file: the writer died before the header
        return _columns({name: pa.chunked_array([], type=t) for name, t in _TYPES.items()})
    try:
        table = pacsv.read_csv(
            path,
            parse_options=pacsv.ParseOptions(invalid_row_handler=_skip),
            convert_options=pacsv.ConvertOptions(
                column_types=_TYPES,
                include_columns=list(_TYPES),
                strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{path}: unreadable ledger row: {exc}") from None
    topics = _dictionary(table["topic"])
    if topic is not None:
        table = table.filter(pc.take(pc.equal(topics.dictionary, topic), topics.indices))
    else:
        present = pc.take(topics.dictionary, pc.unique(topics.indices))
        require_one_topic(set(present.to_pylist()))
    del topics
    return _columns(_pop_table(table))


def _pop_table(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    """The table's columns, in a dict that ``_columns`` empties as it converts them: each
    column's memory goes as soon as its numpy copy is made (a large table and all its copies
    at once would be most of the checker's peak memory: docs/performance.md)."""
    return {name: table.column(name) for name in _TYPES}


def _dictionary(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """A dictionary-encoded column as one array over one dictionary."""
    if not column.num_chunks:
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    return column.unify_dictionaries().combine_chunks()


def _skip(_row: pacsv.InvalidRow) -> str:
    return "skip"  # a line with the wrong number of fields: not a row, as for read_ledger


def _has_header(path: Path) -> bool:
    with path.open(newline="") as f:
        header = next(csv.reader(f), None)
    if header is not None and tuple(header) != COLUMNS:
        raise ValueError(f"{path} is not a ledger (header {header})")
    return header is not None


def _columns(table: dict[str, pa.ChunkedArray]) -> dict[str, np.ndarray]:
    for name in _TYPES:
        if nulls := table[name].null_count:
            raise ValueError(f"ledger column {name!r} has {nulls} empty value(s)")
    kinds = _dictionary(table.pop("kind"))
    codes = pc.take(pc.index_in(kinds.dictionary, value_set=_KIND_VALUES), kinds.indices)
    if unknown := codes.null_count:
        names = pc.unique(pc.filter(kinds.dictionary.take(kinds.indices), pc.is_null(codes)))
        names = names.to_pylist()
        raise ValueError(
            f"{unknown} ledger row(s) of unknown kind {sorted(names)}, "
            f"expected one of {_KIND_VALUES.to_pylist()}"
        )
    del kinds
    table.pop("topic")
    return {
        "kind": _numpy(codes, np.int8),
        **{name: _numpy(table.pop(name), dtype) for name, dtype in _NUMPY.items()},
    }


def _numpy(column: pa.ChunkedArray | pa.Array, dtype: type[np.generic]) -> np.ndarray:
    values: np.ndarray = column.to_numpy().astype(dtype, copy=False)
    return values
