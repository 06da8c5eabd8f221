"""Rows, the contract every measurement reads: one completion of one prompt with its verdict.

``assay.rows()`` (in :mod:`assay.builder`) builds them from prompts and completions, grading
them when given a verifier; ``as_table()`` reads any row-like input.

Inside, rows are an Arrow table with the columns of :data:`ROW_SCHEMA`; at the API edge a row is
a dict. ``privileged``, ``judge_meta`` and ``meta`` hold arbitrary JSON and are stored as JSON
text, so every round trip (dicts, Arrow, pandas, Parquet) is lossless. ``meta`` keeps a source
record's own fields (subject, level, ...) for steps and ``by:``; tables written before it
existed load with ``meta`` empty.

Example:
    >>> import assay
    >>> qs = ["What is 2 + 3?", "What is 7 * 6?"]
    >>> r = assay.rows(qs, [["5", "4"], ["42", "42"]], [[1, 0], [1, 1]])
    >>> [row["reward"] for row in r], r[0]["rollout_index"], r[1]["rollout_index"]
    ([1.0, 0.0, 1.0, 1.0], 0, 1)
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeAlias, cast, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from assay.errors import RowsError, RowsTypeError
from assay.hashing import content_hash, digest_parts
from assay.jsontypes import JSONValue

if TYPE_CHECKING:
    import pandas as pd

#: Rows as the public functions take them (read by :func:`as_table`): :class:`Rows`, an Arrow
#: table of the row contract, a list of dict rows, or a pandas DataFrame.
RowsLike: TypeAlias = "Rows | pa.Table | Sequence[Mapping[str, object]] | pd.DataFrame"

ROWS_SCHEMA_VERSION = 1

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])
MARKERS_TYPE = pa.map_(pa.string(), pa.float64())

#: The canonical columns, in order. ``privileged``, ``judge_meta`` and ``meta`` are JSON text.
ROW_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),
        pa.field("final_text", pa.string(), nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("markers", MARKERS_TYPE),
        pa.field("messages", pa.list_(MESSAGE_TYPE)),
        pa.field("rollout_index", pa.int64()),
        pa.field("privileged", pa.string()),
        pa.field("judge_name", pa.string()),
        pa.field("judge_status", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("judge_meta", pa.string()),
        pa.field("meta", pa.string()),
        pa.field("schema_version", pa.int32()),
    ]
)
COLUMNS = tuple(ROW_SCHEMA.names)
#: What a trainer may see of a row: never ``privileged`` (references, hidden tests) nor the
#: judge's reasons and metadata, which can leak the reference; nor ``meta``, the source
#: record's other fields, which often hold a worked solution or a hint (GSM8K's answer text,
#: MATH's solution) that the field map did not name.
TRAINING_COLUMNS = ("task_id", "prompt", "messages", "final_text", "reward", "markers",
                    "rollout_index")
_JSON_COLUMNS = ("privileged", "judge_meta", "meta")
#: JSON columns whose non-null values must be dicts (objects).
_DICT_COLUMNS = ("privileged", "meta")


# ---------------------------------------------------------------------------------------------
# helpers


def _json_default(o: object) -> object:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    raise TypeError(type(o).__name__)


def _c_encoder() -> Callable[[object], str]:
    """json's C encoder, built once: ``JSONEncoder.encode`` builds a new one on every call,
    half the cost of encoding a small dict (2.7 vs 5.2 us; one call per row at the API edge).
    Same output as ``JSONEncoder(ensure_ascii=False, sort_keys=True, allow_nan=False)``. No
    markers dict (it would be shared between threads): a circular value ends in RecursionError,
    reported like any other unencodable value."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return json.JSONEncoder(ensure_ascii=False, sort_keys=True, allow_nan=False,
                                default=_json_default).encode
    c = make(None, _json_default, json.encoder.encode_basestring, None, ": ", ", ", True, False,
             False)
    return lambda value: "".join(c(value, 0))


_encode = _c_encoder()


def to_json(value: object, where: str) -> str | None:
    """``value`` as canonical JSON text (sorted keys, no NaN), or a RowsError naming ``where``."""
    if value is None:
        return None
    try:
        return _encode(value)
    except RecursionError:
        raise RowsError(f"{where}: value is circular or nested too deeply to store as JSON; "
                        "use plain str/number/list/dict values") from None
    except (TypeError, ValueError) as e:
        raise RowsError(f"{where}: value is not JSON-serializable ({e}); use str/number/list/dict "
                        "values") from None


def _from_json(text: str | None) -> JSONValue:
    return None if text is None else json.loads(text)


def task_id_for(messages: Sequence[Mapping[str, str]]) -> str:
    """Default task id: a hash of the whole conversation (every message, role and content).

    Two conversations that end in the same last turn never merge into one task.

    Example:
        >>> hi = [{"role": "user", "content": "Hi"}]
        >>> task_id_for(hi) == task_id_for([{"role": "user", "content": "Hi"}])
        True
    """
    return content_hash([[m["role"], m["content"]] for m in messages], "task")


def messages_of(prompt: object, i: int) -> tuple[list[dict[str, str]], str]:
    """(messages, last user turn) for prompt i, or an error naming it."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}], prompt
    if prompt is None:
        raise RowsTypeError(f"prompts[{i}] is None; give a string or a list of "
                            "{'role', 'content'} messages")
    if isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
        msgs = []
        for j, m in enumerate(prompt):
            if (not isinstance(m, Mapping) or set(m) - {"role", "content"} or "role" not in m
                    or "content" not in m):
                raise RowsError(
                    f"prompts[{i}][{j}]: a message is a dict with exactly 'role' and 'content' "
                    f"(strings), got {m!r:.120}"
                )
            if not isinstance(m["role"], str) or not isinstance(m["content"], str):
                raise RowsTypeError(f"prompts[{i}][{j}]: 'role' and 'content' must be strings, got "
                                    f"{m!r:.120}")
            msgs.append({"role": m["role"], "content": m["content"]})
        users = [m["content"] for m in msgs if m["role"] == "user"]
        if not users:
            raise RowsError(f"prompts[{i}] has no message with role 'user'; the row's prompt is "
                            "the last user turn")
        return msgs, users[-1]
    raise RowsTypeError(f"prompts[{i}]: expected a string or a list of messages, got "
                        f"{type(prompt).__name__}")


def is_sequence(x: object) -> bool:
    """A list-like of values (list, tuple, ndarray, Sequence), never a string or a mapping."""
    return isinstance(x, (list, tuple, np.ndarray)) or (
        isinstance(x, Sequence) and not isinstance(x, (str, bytes, bytearray, Mapping))
    )


@overload
def check_number(x: object, where: str, *, lo: float | None = 0.0, hi: float | None = 1.0,
                 what: str = "reward", allow_none: Literal[False]) -> float: ...
@overload
def check_number(x: object, where: str, *, lo: float | None = 0.0, hi: float | None = 1.0,
                 what: str = "reward", allow_none: bool = True) -> float | None: ...
def check_number(x: object, where: str, *, lo: float | None = 0.0, hi: float | None = 1.0,
                 what: str = "reward", allow_none: bool = True) -> float | None:
    """``x`` as a float in [lo, hi] (bools as 0/1); None, NaN, strings and out-of-range values
    raise an error naming ``where``."""
    if x is None:
        if allow_none:
            return None
        raise RowsTypeError(f"{where}: {what} is None")
    if isinstance(x, (bool, np.bool_)):
        return float(x)
    if not isinstance(x, numbers.Real):
        raise RowsTypeError(f"{where}: {what} must be a number, got {type(x).__name__} {x!r:.60}")
    v = float(x)
    if math.isnan(v):
        raise RowsError(f"{where}: {what} is NaN; use None for an unjudged row, never NaN")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise RowsError(f"{where}: {what} {v!r} is outside [{lo}, {hi}]; rescale it to [0, 1]")
    if not math.isfinite(v):
        raise RowsError(f"{where}: {what} {v!r} is not finite")
    return v


def check_markers(m: object, where: str) -> dict[str, float]:
    """A markers dict ``{name: finite number}`` checked value by value; None reads as no markers."""
    if m is None:
        return {}
    if not isinstance(m, Mapping):
        raise RowsTypeError(f"{where}: markers must be a dict {{name: number}}, got "
                            f"{type(m).__name__}")
    out = {}
    for k, v in m.items():
        if not isinstance(k, str):
            raise RowsTypeError(f"{where}: marker name {k!r} is not a string")
        if v is None:
            raise RowsTypeError(f"{where}: marker {k!r} is None; omit the key for a missing "
                                "measurement")
        out[k] = check_number(v, where, lo=None, hi=None, what=f"marker {k!r}", allow_none=False)
    return out


def markers_array(dicts: Sequence[Mapping[str, float]]) -> pa.Array:
    """Checked markers dicts as an Arrow array of :data:`MARKERS_TYPE`."""
    return pa.array([list(d.items()) for d in dicts], type=MARKERS_TYPE)


# ---------------------------------------------------------------------------------------------
# Rows


class Rows(Sequence):
    """An immutable sequence of rows backed by an Arrow table of :data:`ROW_SCHEMA`.

    Indexing gives a dict (or a ``Rows`` for a slice); ``to_arrow``, ``to_pandas``,
    ``to_parquet`` and their inverses are lossless. ``checksum()`` is content-based, computed
    once.

    Example:
        >>> import assay
        >>> r = assay.rows(["a?"], ["x"], [1])
        >>> Rows.from_arrow(r.to_arrow()) == r
        True
    """

    __slots__ = ("_table", "__dict__")

    def __init__(self, table: pa.Table) -> None:
        if not isinstance(table, pa.Table):
            raise RowsTypeError(f"Rows() needs a pyarrow.Table, got {type(table).__name__}; use "
                                "as_table()")
        self._table = as_table(table, require=())

    def training_table(self) -> pa.Table:
        """The rows projected on :data:`TRAINING_COLUMNS`: what an RL or SFT export may carry.

        Example:
            >>> import assay
            >>> r = assay.rows(["2+3?"], ["5"], [1], references=["5"])
            >>> "privileged" in r.training_table().column_names
            False
        """
        return self._table.select(list(TRAINING_COLUMNS))

    # sequence protocol ----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._table.num_rows

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> Rows: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | Rows:
        if isinstance(i, slice):
            idx = range(len(self))[i]
            return Rows(self._table.take(pa.array(list(idx), type=pa.int64())))
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row index {i} out of range for {n} rows")
        return self._records[i % n]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._records)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rows):
            return NotImplemented
        return self._table.equals(other._table)

    __hash__ = None  # type: ignore[assignment]  # equal by value, so unhashable

    def __repr__(self) -> str:
        t = self._table
        tasks = len(pc.unique(t.column("task_id"))) if len(self) else 0
        judged = len(self) - t.column("reward").null_count
        return f"Rows(n={len(self)}, tasks={tasks}, judged={judged})"

    @cached_property
    def _records(self) -> list[dict[str, Any]]:
        return table_to_records(self._table)

    # conversions ---------------------------------------------------------------------------
    @property
    def table(self) -> pa.Table:
        """The underlying Arrow table (immutable)."""
        return self._table

    def to_arrow(self) -> pa.Table:
        """The rows as an Arrow table of :data:`ROW_SCHEMA`."""
        return self._table

    @classmethod
    def from_arrow(cls, table: pa.Table) -> Rows:
        """Rows from an Arrow table (canonical or loose columns; validated)."""
        return cls(as_table(table, require=("prompt", "final_text")))

    def to_pandas(self) -> pd.DataFrame:
        """A pandas DataFrame with one dict-valued ``markers``/``privileged`` per row."""
        import pandas as pd

        df = pd.DataFrame.from_records(self._records, columns=list(COLUMNS))
        # Nullable dtype: an unjudged row is <NA>, never NaN (a NaN reward read back is an error).
        df["reward"] = pd.array(self._table.column("reward").to_pylist(), dtype="Float64")
        return df

    @classmethod
    def from_pandas(cls, df: pd.DataFrame) -> Rows:
        """Rows from a DataFrame (as written by :meth:`to_pandas`, or with fewer columns)."""
        return cls(as_table(df, require=("prompt", "final_text")))

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, object]]) -> Rows:
        """Rows from a list of dict rows."""
        return cls(as_table(list(records), require=("prompt", "final_text")))

    def to_parquet(self, path: str | os.PathLike[str]) -> None:
        """Write the rows to a Parquet file."""
        pq.write_table(self._table, path, compression="zstd")

    @classmethod
    def read_parquet(cls, path: str | os.PathLike[str]) -> Rows:
        """Read rows written by :meth:`to_parquet`."""
        # single-threaded read: see assay.store.Store.get_table (apache/arrow#34314)
        table = pq.read_table(path, use_threads=False, pre_buffer=False)
        return cls(as_table(table, require=("prompt", "final_text")))

    def checksum(self) -> str:
        """Content id ``rows:<32 hex>`` over every column, order-sensitive; cached.

        Strings are NFC-normalized before hashing, as in :mod:`assay.hashing`.
        """
        cached = self.__dict__.get("_checksum")
        if cached is None:
            cached = table_checksum(self._table, "rows")
            self.__dict__["_checksum"] = cached
        return cached

    def __assay_content__(self) -> str:
        return self.checksum()


def table_checksum(table: pa.Table, prefix: str) -> str:
    """Content id of an Arrow table: column names, types and values, in order.

    The hashed bytes are the canonical JSON ``{name: [type, values], ...}`` (sorted keys,
    compact, UTF-8, strings NFC-normalized, maps as sorted pairs): ids key the store's cache, so
    they never change. They are built and hashed ``_CHUNK`` rows of one column at a time, never
    as one string (a 400k-row table's column was ~250 MB of text): lists of string structs
    (``messages``) are written from their flattened fields, numbers go through numpy, and from
    2,048 rows string columns encode each distinct value once (a prompt repeats for each of its
    samples); any other column goes through Python values and ``json.dumps``.

    Example:
        >>> from assay.hashing import digest_bytes
        >>> t = pa.table({"a": ["x", "x", None], "n": [1, 2, 3]})
        >>> table_checksum(t, "t") == digest_bytes(
        ...     b'{"a":["string",["x","x",null]],"n":["int64",[1,2,3]]}', "t")
        True
    """
    def column(name: str, big: bool) -> tuple[pa.DataType, Iterator[str]]:
        col = table.column(name)
        return col.type, _column_parts(col, big)

    return _columns_checksum(table.column_names, column, table.num_rows, prefix)


#: ``(name, big) -> (type, pieces)``: one column's type and the pieces of its JSON array.
_ColumnParts: TypeAlias = Callable[[str, bool], tuple[pa.DataType, Iterator[str]]]


def _columns_checksum(names: Sequence[str], column: _ColumnParts, num_rows: int,
                      prefix: str) -> str:
    """:func:`table_checksum` of a table whose columns ``column`` gives, one at a time."""
    big = num_rows >= _BIG

    def parts() -> Iterator[bytes]:
        for i, name in enumerate(sorted(names)):
            typ, pieces = column(name, big)
            head = "{" if i == 0 else ","
            yield f"{head}{_enc(name)}:[{_enc(str(typ))},".encode()
            for piece in pieces:
                yield piece.encode()
            yield b"]"
        yield b"}" if names else b"{}"

    return digest_parts(parts(), prefix)


#: Rows per Parquet row group of a stored rows table: a shard decodes the groups that hold
#: its rows, not the whole table (``stages.cache.load_slice``; one group held 1Mi rows).
ROW_GROUP_ROWS = 16384


class ParquetRows:
    """Rows already encoded as one Parquet file (zstd, :data:`ROW_GROUP_ROWS` a group), with
    their content id: what a build that never holds every row makes (issue 50). The store keeps
    the bytes as they are; ``checksum()`` equals ``Rows.checksum()`` of the same rows, and is
    computed a column at a time from the file.

    Example:
        >>> import io, assay
        >>> r = assay.rows(["q"], [["a", "b"]], [[1.0, 0.0]])
        >>> buf = io.BytesIO()
        >>> pq.write_table(r.to_arrow(), buf, compression="zstd")
        >>> p = ParquetRows(buf.getvalue(), r.to_arrow().schema)
        >>> len(p), p.checksum() == r.checksum()
        (2, True)
    """

    def __init__(self, data: bytes, schema: pa.Schema) -> None:
        self.data = data
        self._file = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
        # the rows' own types: Parquet gives some back renamed (a list's item, a map's entries),
        # and a type's name is part of the checksum
        self.schema = schema
        self._checksum: str | None = None

    def __len__(self) -> int:
        return self._file.metadata.num_rows

    def checksum(self) -> str:
        if self._checksum is None:
            f, schema = self._file, self.schema

            def chunks(name: str, typ: pa.DataType) -> Iterator[pa.ChunkedArray]:
                for b in f.iter_batches(batch_size=_CHUNK, columns=[name], use_threads=False):
                    if b.num_rows:
                        yield pa.chunked_array([b.column(0).cast(typ)])

            def column(name: str, big: bool) -> tuple[pa.DataType, Iterator[str]]:
                # what the column's path depends on, from a first pass over it; then its
                # pieces from a second: a chunk of it held at a time, never the column
                typ = schema.field(name).type
                nulls, inside = False, False
                for c in chunks(name, typ):
                    nulls = nulls or bool(c.null_count)
                    inside = inside or (_string_struct_list(typ) and _nulls_inside(c))
                return typ, _pieces(typ, big, nulls, inside, chunks(name, typ))

            self._checksum = _columns_checksum(schema.names, column, f.metadata.num_rows, "rows")
        return self._checksum

    def to_rows(self) -> Rows:
        """Every row decoded (what a caller that needs them whole reads)."""
        return Rows(self._file.read(use_threads=False).cast(self.schema))


#: JSON's own string encoder (what ``json.dumps(..., ensure_ascii=False)`` calls per string).
_enc: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]  # not in the stubs


#: Rows from which strings are encoded through Arrow's dictionary, each distinct value once;
#: below it (a grading shard) the Arrow calls cost more than they save.
_BIG = 2048


#: Rows of one column encoded and hashed at a time: what the hash holds at once is a chunk's
#: text and Python values (a few MB), not the column's (hashing a built 400k-row table took the
#: process from ~712 to ~970 MiB when each column was one string).
_CHUNK = 16384


def _column_parts(col: pa.ChunkedArray, big: bool) -> Iterator[str]:
    """The JSON array of one column's values, in pieces whose concatenation is what
    ``json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)`` writes (strings NFC), ``_CHUNK`` rows a piece. ``big``: encode strings
    through Arrow's dictionary (each distinct value once per chunk). Which path a column takes
    is chosen once, from the whole column, so the bytes never depend on the chunking."""
    typ = col.type
    inside = _string_struct_list(typ) and _nulls_inside(col)
    return _pieces(typ, big, bool(col.null_count), inside,
                   (col.slice(lo, _CHUNK) for lo in range(0, len(col), _CHUNK)))


def _pieces(typ: pa.DataType, big: bool, has_nulls: bool, nulls_inside: bool,
            chunks: Iterable[pa.ChunkedArray]) -> Iterator[str]:
    """:func:`_column_parts` of a column given as ``chunks`` (none empty), with what its path
    depends on found over the whole column beforehand: whether it ``has_nulls`` and, for a
    list of string structs, whether it has ``nulls_inside`` (:func:`_nulls_inside`)."""
    if big and (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        def inner(part: pa.ChunkedArray) -> str:
            return ",".join(_encoded(pc.utf8_normalize(part, "NFC")))
    elif _string_struct_list(typ) and not nulls_inside:
        def inner(part: pa.ChunkedArray) -> str:
            return _struct_list_json(part, big)[1:-1]
    else:
        numbers = not has_nulls  # numpy's numbers only for a null-free column, as before

        def inner(part: pa.ChunkedArray) -> str:
            return json.dumps(_values(part, numbers), sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False, allow_nan=False)[1:-1]
    yield "["
    for i, part in enumerate(chunks):
        # a slice is a zero-copy view; a chunk's JSON is never empty ("null" at least)
        yield ("," if i else "") + inner(part)
    yield "]"


def _values(col: pa.ChunkedArray, numbers: bool = True) -> list[object]:
    """A column's values as the canonical JSON takes them: strings NFC, maps as sorted pairs.
    ``numbers``: a null-free integer/float column may go through numpy."""
    typ = col.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pc.utf8_normalize(col, "NFC").to_pylist()
    if numbers and (pa.types.is_integer(typ) or pa.types.is_floating(typ)) \
            and not col.null_count and not pa.types.is_float16(typ):
        return col.to_numpy().tolist()  # the same Python numbers, without Arrow scalars
    values = col.to_pylist()
    if pa.types.is_map(typ):
        values = [None if v is None else sorted(v) for v in values]
    return values


def _string_struct_list(typ: pa.DataType) -> bool:
    """A list of structs whose fields are all strings (``messages``)."""
    if not pa.types.is_list(typ) or not pa.types.is_struct(typ.value_type):
        return False
    st = typ.value_type
    names = [st.field(i).name for i in range(st.num_fields)]
    return bool(names) and len(set(names)) == len(names) and all(
        pa.types.is_string(st.field(i).type) for i in range(st.num_fields))


def _nulls_inside(col: pa.ChunkedArray) -> bool:
    """Whether a list-of-structs column has a null anywhere (lists, structs or fields)."""
    if col.null_count:
        return True
    for chunk in col.chunks:
        items = chunk.flatten()
        if items.null_count or any(f.null_count for f in items.flatten()):
            return True
    return False


def _encoded(arr: pa.Array | pa.ChunkedArray, big: bool = True) -> list[str]:
    """Each string of ``arr`` as JSON writes it (``null`` for a null); when ``big``, each
    distinct value encoded once (a prompt repeats for each of its samples)."""
    if not big:
        return [("null" if v is None else _enc(v)) for v in arr.to_pylist()]
    enc = pc.dictionary_encode(arr, null_encoding="encode")
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    uniq = [("null" if v is None else _enc(v)) for v in enc.dictionary.to_pylist()]
    return [uniq[i] for i in enc.indices.to_numpy().tolist()]


def _struct_list_json(col: pa.ChunkedArray, big: bool) -> str:
    """A null-free list-of-string-structs column as JSON: each struct an object with sorted
    keys, written from the flattened fields (no Python dict per item). Nested strings are not
    NFC-normalized: the ids never normalized them (only top-level string columns)."""
    st = col.type.value_type
    names = [st.field(i).name for i in range(st.num_fields)]
    order = sorted(range(len(names)), key=names.__getitem__)
    rows: list[str] = []
    for chunk in col.chunks:
        if not len(chunk):
            continue
        fields = chunk.flatten().flatten()  # the items' fields, the chunk's slice applied
        # '{"content":' + value, ',"role":' + value + '}': one list per field, then zipped
        pieces = []
        for n, k in enumerate(order):
            head = ("{" if n == 0 else ",") + _enc(names[k]) + ":"
            tail = "}" if n == len(order) - 1 else ""
            pieces.append([head + v + tail for v in _encoded(fields[k], big)])
        objs = list(map("".join, zip(*pieces))) if len(pieces) > 1 else pieces[0]
        offsets = chunk.offsets.to_numpy()
        offsets = (offsets - offsets[0]).tolist()
        if len(objs) == len(chunk) and offsets == list(range(len(chunk) + 1)):
            rows += ["[" + o + "]" for o in objs]  # one item per row (a one-turn prompt)
        else:
            rows += ["[" + ",".join(objs[a:b]) + "]" for a, b in zip(offsets, offsets[1:])]
    return "[" + ",".join(rows) + "]"


def table_to_records(table: pa.Table) -> list[dict[str, Any]]:
    """Dict rows from a canonical table (markers as dicts, JSON columns decoded)."""
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    if "markers" in cols:
        cols["markers"] = [dict(m) if m is not None else {} for m in cols["markers"]]
    for name in _JSON_COLUMNS:
        if name in cols:
            cols[name] = [_from_json(v) for v in cols[name]]
    names = list(cols)
    return [dict(zip(names, vals)) for vals in zip(*cols.values())] if names else []


# ---------------------------------------------------------------------------------------------
# as_table: every measurement's entry point


def _column_values(data: RowsLike, name: str) -> list[Any] | None:
    """Values of one column from a list of dicts / DataFrame / Arrow table, or None if absent."""
    if isinstance(data, pa.Table):
        if name not in data.column_names:
            return None
        col = data.column(name)
        vals = col.to_pylist()
        if pa.types.is_map(col.type):
            vals = [dict(v) if v is not None else None for v in vals]
        return vals
    if hasattr(data, "columns") and hasattr(data, "to_dict"):  # pandas
        df = cast("pd.DataFrame", data)
        if name not in df.columns:
            return None
        from pandas import NA as _PD_NA  # loaded already: data is a DataFrame

        vals = df[name].tolist()
        # pd.NA / None are explicit "missing"; a float NaN is only "missing" outside reward,
        # where NaN would otherwise pass as a score.
        out = [None if (v is _PD_NA or (isinstance(v, float) and math.isnan(v)
                                        and name != "reward")) else v for v in vals]
        if name == "reward" and "judge_status" in df.columns:
            out = _unjudged_nan_as_none(out, df["judge_status"].tolist())
        if name == "markers":
            out = [_pairs_as_dict(v) for v in out]
        return out
    try:  # every row has the key: one C-level pass (about half the time of r.get per row)
        return list(map(itemgetter(name), data))
    except KeyError:
        return [r.get(name) for r in data]


def _unjudged_nan_as_none(rewards: Sequence[object], status: Sequence[object]) -> list[object]:
    """A DataFrame's float column cannot hold None: pandas reads assay's unjudged reward as NaN.
    A NaN reward is read as None exactly where the row's own ``judge_status`` says it has no
    score (anything but ``ok``/``given``, which every row assay writes carries); a NaN beside
    ``ok``, ``given`` or no status is a real NaN and is refused downstream."""
    return [None if (isinstance(r, float) and math.isnan(r) and isinstance(st, str)
                     and st not in ("ok", "given")) else r
            for r, st in zip(rewards, status)]


def _pairs_as_dict(v: object) -> object:
    """Markers as pandas reads them from assay's Parquet (a map column: a list or array of
    ``(name, value)`` pairs) become the dict they were; anything else is left for the check."""
    if v is None or isinstance(v, Mapping) or isinstance(v, (str, bytes)):
        return v
    if isinstance(v, (list, tuple, np.ndarray)):
        pairs = list(v)
        if all(isinstance(p, (tuple, list, np.ndarray)) and len(p) == 2 and isinstance(p[0], str)
               for p in pairs):
            return {p[0]: p[1] for p in pairs}
    return v


#: What the measurement calls read (``assay.measure``): rows given as dicts, a DataFrame or a
#: non-canonical Arrow table are validated on these columns only.
MEASURED_COLUMNS = ("task_id", "reward", "markers")


def _rank_within(task_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each row's number among the rows of its task, in row order (0, 1, ... per task id).
    Arrow and numpy only: pandas' groupby would be the one pandas import of a run that builds
    rows before its first request (a tenth of a second of start-up).

    Example:
        >>> _rank_within(pa.array(["a", "b", "a", "a", "b"])).tolist()
        [0, 0, 1, 2, 1]
    """
    if isinstance(task_ids, pa.ChunkedArray):
        task_ids = task_ids.combine_chunks()
    codes = task_ids.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    n = len(codes)
    order = np.argsort(codes, kind="stable")  # rows of one task together, in row order
    ordered = codes[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if n else np.array([], int)
    first_of_group = np.repeat(starts, np.diff(np.r_[starts, n]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - first_of_group
    return rank

def stored_columns(table: pa.Table) -> Rows:
    """Rows of some columns of rows assay stored (validated when they were stored), the others
    filled as :func:`as_table` fills a missing column, without reading every value into Python
    to validate it again (the measure stage's rows at 400k: twice its memory). Without task ids
    and rollout numbers, or with prompts and no messages (to derive), it is :func:`as_table`'s
    full check.

    Example:
        >>> import assay
        >>> r = assay.rows(["q"], [["a", "b"]], [[1.0, 0.0]]).to_arrow()
        >>> part = r.select(["task_id", "rollout_index", "reward"])
        >>> stored_columns(part).to_arrow().equals(as_table(part, require=()))
        True
    """
    names = set(table.column_names)
    if not {"task_id", "rollout_index"} <= names or ("prompt" in names) > ("messages" in names):
        return Rows(table)  # ids, or messages from the prompts, to derive: the full check
    n = table.num_rows
    arrays = []
    for f in ROW_SCHEMA:
        if f.name in names:
            arrays.append(table.column(f.name).cast(f.type))
        elif f.name in ("prompt", "final_text"):  # n empty strings, n empty lists: from
            # offsets (pa.repeat of "" or [] went through ~40-190 MB at 400k rows)
            arrays.append(pa.StringArray.from_buffers(
                n, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)), pa.py_buffer(b"")))
        elif f.name == "messages":
            arrays.append(pa.ListArray.from_arrays(
                pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], f.type.value_type),
                type=f.type))
        elif f.name == "markers":  # n empty maps
            arrays.append(pa.MapArray.from_arrays(
                pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], f.type.key_type),
                pa.array([], f.type.item_type), type=f.type))
        elif f.name == "schema_version":
            arrays.append(pa.repeat(pa.scalar(ROWS_SCHEMA_VERSION, f.type), n))
        else:
            arrays.append(pa.nulls(n, f.type))
    return Rows(pa.Table.from_arrays(arrays, schema=ROW_SCHEMA))


def as_table(data: RowsLike, *, require: Iterable[str] = ("prompt", "final_text"),
             argument: str = "rows", columns: Iterable[str] | None = None) -> pa.Table:
    """Read ``Rows``, a list of dict rows, a pandas DataFrame or an Arrow table into a table of
    :data:`ROW_SCHEMA`, validating every value. Errors name ``argument`` and the row index.

    ``require`` lists columns that must be present and non-null (``task_id`` is satisfied by a
    ``prompt`` or ``messages`` to hash). A missing ``reward`` column means unjudged rows.
    ``columns``: validate and return only these columns of ROW_SCHEMA (and those in
    ``require``), as a table of just those fields; a missing task id is still derived from the
    row's prompt or messages, and every row key is still checked against the contract. A table
    that already has ROW_SCHEMA is returned whole either way (nothing to validate or copy).

    Example:
        >>> t = as_table([{"task_id": "t1", "reward": 1}, {"task_id": "t1", "reward": 0}],
        ...              require=("reward",))
        >>> t.column("reward").to_pylist(), t.column("prompt").to_pylist()
        ([1.0, 0.0], ['', ''])
        >>> # only the columns read are validated: the bad prompt is not looked at
        >>> as_table([{"task_id": "t1", "reward": 1, "prompt": 5}], columns=("reward",),
        ...          require=("reward",)).column_names
        ['reward']
    """
    if isinstance(data, Rows):
        data = data.table
    if isinstance(data, pa.Table) and data.schema.remove_metadata() == ROW_SCHEMA:
        # cast: Parquet renames nested fields (list item -> element), which compare equal but
        # would print differently; one canonical schema keeps checksums stable.
        table = data.replace_schema_metadata(None).cast(ROW_SCHEMA)
        _require(table, tuple(require), argument)
        return table
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, Mapping) or isinstance(data, str):
        raise RowsTypeError(f"{argument}: expected rows (a list of dicts, Rows, DataFrame or Arrow "
                            f"table), got {type(data).__name__}")
    if not isinstance(data, pa.Table) and not (hasattr(data, "columns")
                                               and hasattr(data, "to_dict")):
        try:
            data = list(data)
        except TypeError:
            raise RowsTypeError(f"{argument}: expected rows, got {type(data).__name__}") from None
        if not set(map(type, data)) <= {dict}:
            for i, r in enumerate(data):
                if type(r) is not dict and not isinstance(r, Mapping):
                    raise RowsTypeError(f"{argument}[{i}]: a row is a dict, got {type(r).__name__}")
    require = tuple(require)
    keep = set(COLUMNS) if columns is None else set(columns) | set(require)
    if keep - set(COLUMNS):
        raise ValueError(f"as_table: columns {sorted(keep - set(COLUMNS))} are not in ROW_SCHEMA "
                         f"{list(COLUMNS)}")
    want = set(keep)  # what is read and checked: also the prompt / messages a missing task id needs
    n = data.num_rows if isinstance(data, pa.Table) else len(data)
    known = set(COLUMNS)
    if isinstance(data, pa.Table):
        present = set(data.column_names)
    elif hasattr(data, "columns"):
        present = set(data.columns)
    else:  # one C-level pass over every row's keys
        present = set(chain.from_iterable(data))
    # Columns outside the contract are not dropped silently: engine-emitted extras like
    # scenario_id are tolerated, anything else is named.
    unknown = sorted(str(c) for c in
                     present - known - {"scenario_id", "arm", "run_id", "lineage", "steps"})
    if unknown:
        raise RowsError(
            f"{argument}: unknown row keys {unknown}; row keys are {list(COLUMNS)}. Put extra "
            "measurements in 'markers', record fields in 'meta' and hidden data in 'privileged'"
        )
    got: dict[str, list[Any] | None] = {}

    def get(c: str) -> list[Any] | None:
        if c not in got:
            got[c] = _column_values(data, c) if c in present else None
        return got[c]

    def where(i: int) -> str:
        return f"{argument}[{i}]"

    # task ids first: a row without one needs its prompt or messages, validated, to hash
    need_ids = bool({"task_id", "rollout_index"} & want)  # rollouts are numbered within a task
    tids = get("task_id") if need_ids else None
    fast = _try_array(tids, pa.string()) if tids is not None else None
    tids_ok = (fast is not None and not fast.null_count
               and (n == 0 or pc.min(pc.utf8_length(fast)).as_py() > 0))
    if need_ids and not tids_ok:
        want |= {"prompt", "messages"}

    if "messages" in want:  # absent messages are built from the prompt
        want.add("prompt")
    arrays: dict[str, pa.Array] = {}
    # text columns: vectorized, with a per-row pass only to word the error
    for c in ("prompt", "final_text"):
        if c not in want:
            continue
        vals = get(c)
        if vals is None:
            if c in require:
                _missing(c, argument)
            arrays[c] = pa.array([""] * n, type=pa.string())
            continue
        arr = _try_array(vals, pa.string())
        if arr is None or arr.null_count:
            for i, v in enumerate(vals):
                if v is None:
                    raise RowsTypeError(f"{where(i)}: '{c}' is None; a row needs a string {c} "
                                        "(never the text 'None')")
                if not isinstance(v, str):
                    raise RowsTypeError(f"{where(i)}: '{c}' must be a string, got "
                                        f"{type(v).__name__}")
        arrays[c] = arr
    prompts = (get("prompt") or [""] * n) if "prompt" in want else None
    # messages: absent means the prompt was a single user turn
    msgs_out = None
    if "messages" in want:
        msgs = get("messages")
        if msgs is None:
            arrays["messages"] = _single_turn_messages(arrays["prompt"])
        else:
            assert prompts is not None  # "messages" in want brings "prompt" in (above)
            msgs_out = []
            for i, m in enumerate(msgs):
                if m is None or (hasattr(m, "__len__") and len(m) == 0):
                    p = prompts[i]
                    msgs_out.append([{"role": "user", "content": p}] if p else [])
                else:
                    msgs_out.append(messages_of(list(m), i)[0] if is_sequence(m)
                                    else messages_of(m, i)[0])
            arrays["messages"] = pa.array(msgs_out, type=pa.list_(MESSAGE_TYPE))
    # task ids
    memo: dict[str, str] = {}

    def default_tid(i: int) -> str:
        if msgs_out is None:
            p = prompts[i]
            if not p:
                raise RowsError(f"{where(i)}: no 'task_id' and no 'prompt' or 'messages' to derive "
                                "one from")
            if p not in memo:
                memo[p] = task_id_for([{"role": "user", "content": p}])
            return memo[p]
        m = msgs_out[i]
        if not m:
            raise RowsError(f"{where(i)}: no 'task_id' and no 'prompt' or 'messages' to derive one "
                            "from")
        return task_id_for(m)

    t_out: list[str] | None = None
    if tids_ok:
        arrays["task_id"] = fast
    elif need_ids:
        if tids is None:
            t_out = [default_tid(i) for i in range(n)]
        else:
            t_out = []
            for i, v in enumerate(tids):
                if v is None:
                    t_out.append(default_tid(i))
                elif isinstance(v, str) and v:
                    t_out.append(v)
                elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                    raise RowsTypeError(f"{where(i)}: 'task_id' {v!r} is an integer; task ids are "
                                        "strings (use str())")
                else:
                    raise RowsTypeError(f"{where(i)}: 'task_id' must be a non-empty string, got "
                                        f"{v!r:.60}")
        arrays["task_id"] = pa.array(t_out, type=pa.string())
    # reward: vectorized range/NaN check; per-row pass only to word the error
    if "reward" in want:
        rv = get("reward")
        if rv is None:
            if "reward" in require:
                _missing("reward", argument)
            arrays["reward"] = pa.nulls(n, pa.float64())
        else:
            arr = _try_array(rv, pa.float64())
            ok = False
            if arr is not None:
                x = arr.to_numpy(zero_copy_only=False)
                valid = ~np.asarray(arr.is_null())
                ok = bool(np.all((x[valid] >= 0.0) & (x[valid] <= 1.0)))  # False for NaN too
            arrays["reward"] = arr if ok else pa.array(
                [check_number(v, where(i)) for i, v in enumerate(rv)], type=pa.float64())
    # markers: built in C; the per-row pass only words an error
    if "markers" in want:
        mk = get("markers")
        if mk is None:
            arrays["markers"] = pa.array([[]] * n, type=MARKERS_TYPE)
        else:
            arr = _fast_markers(mk)
            if arr is None:
                arr = markers_array([check_markers(m, where(i)) for i, m in enumerate(mk)])
            arrays["markers"] = arr
    # rollout index: given, or numbered within task in order
    if "rollout_index" in want:
        ri = get("rollout_index")
        if ri is None or all(v is None for v in ri):
            arrays["rollout_index"] = pa.array(_rank_within(arrays["task_id"]), type=pa.int64())
        else:
            for i, v in enumerate(ri):
                if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                    raise RowsTypeError(f"{where(i)}: 'rollout_index' must be a non-negative "
                                        f"integer, got {v!r}")
            arrays["rollout_index"] = pa.array([int(v) for v in ri], type=pa.int64())
    # nullable text columns, absent = all null. JSON columns: dicts at the edge, JSON text
    # inside (a string in a table is taken as JSON)
    for c in (*_JSON_COLUMNS, "judge_name", "judge_status", "reason"):
        if c not in want:
            continue
        vals = get(c)
        if vals is None:
            arrays[c] = pa.nulls(n, pa.string())
            continue
        if c in _JSON_COLUMNS:
            arrays[c] = _json_column(data, c, vals, where)
            continue
        arr = _try_array(vals, pa.string())
        if arr is None:
            for i, v in enumerate(vals):
                if v is not None and not isinstance(v, str):
                    raise RowsTypeError(f"{where(i)}: '{c}' must be a string or None, got "
                                        f"{type(v).__name__}")
        arrays[c] = arr
    if "schema_version" in want:
        sv = get("schema_version")
        arrays["schema_version"] = pa.array(
            np.full(n, ROWS_SCHEMA_VERSION, dtype=np.int32) if sv is None
            else [ROWS_SCHEMA_VERSION if v is None else int(v) for v in sv], type=pa.int32())
    fields = [f for f in ROW_SCHEMA if f.name in keep]
    table = pa.Table.from_arrays([arrays[f.name] for f in fields], schema=pa.schema(fields))
    _require(table, require, argument)
    return table


def _json_column(data: RowsLike, c: str, vals: list[Any],
                 where: Callable[[int], str]) -> pa.Array:
    """One JSON column as JSON text: dicts (lists, numbers) are encoded, text from a table is
    checked to parse."""
    if isinstance(data, pa.Table) and pa.types.is_string(data.column(c).type):
        for i, v in enumerate(vals):
            if v is not None:
                try:
                    json.loads(v)
                except json.JSONDecodeError:
                    raise RowsError(f"{where(i)}: '{c}' column holds invalid JSON text") from None
        return pa.array(vals, type=pa.string())
    dicts_only = c in _DICT_COLUMNS
    if vals.count(None) == 0 and (not dicts_only or set(map(type, vals)) <= {dict}):
        try:  # one C-encoder call per row, no Python loop
            return pa.array(list(map(_encode, vals)), type=pa.string())
        except (RecursionError, TypeError, ValueError):
            pass  # the loop below words the error
    col: list[str | None] = []
    # the row's location is only formatted for an error (formatting it for every row was a
    # third of this loop)
    for i, v in enumerate(vals):
        if v is None:
            col.append(None)
            continue
        if dicts_only and type(v) is not dict and not isinstance(v, Mapping):
            raise RowsTypeError(f"{where(i)}: '{c}' must be a dict, got {type(v).__name__}")
        try:
            col.append(_encode(v))
        except (RecursionError, TypeError, ValueError):
            to_json(v, f"{where(i)}.{c}")  # raises the worded error
            raise
    return pa.array(col, type=pa.string())


def _fast_markers(values: list[Any]) -> pa.Array | None:
    """Markers as a map array when every value is a finite number under a string key (None for
    a missing dict is an empty map); None when anything needs the per-row check."""
    types = set(map(type, values))
    if not types <= {dict, type(None)}:
        return None
    if type(None) in types:
        values = [m or {} for m in values]
    shapes = set(map(tuple, values))
    if len(shapes) == 1:
        # Every row carries the same names (the usual case): one column per name, interleaved;
        # ~3x faster than converting the dicts one by one.
        names = next(iter(shapes))
        if not all(type(k) is str for k in names):
            return None
        n, width = len(values), len(names)
        cols = [_try_array(list(map(itemgetter(k), values)), pa.float64()) for k in names]
        if any(c is None or c.null_count for c in cols):
            return None
        full = cast(list[pa.Array], cols)  # none is None (just checked)
        items = (np.column_stack([c.to_numpy(zero_copy_only=False) for c in full]).ravel() if width
                 else np.empty(0, dtype=np.float64))
        if not np.all(np.isfinite(items)):
            return None
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * np.int32(width))
        keys = pa.array(list(names) * n, type=pa.string())
        return pa.MapArray.from_arrays(offsets, keys, pa.array(items, type=pa.float64()),
                                       type=MARKERS_TYPE)
    try:
        arr = pa.array(values, type=MARKERS_TYPE, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    items = arr.items
    if items.null_count or not np.all(np.isfinite(items.to_numpy(zero_copy_only=False))):
        return None
    return arr


def _try_array(values: Sequence[object], typ: pa.DataType) -> pa.Array | None:
    """Strict Arrow conversion (no str->number, no number->str); None if any value is off."""
    try:
        # Arrow refuses str->float and number->str; bools become 1.0/0.0 as check_number does.
        return pa.array(values, type=typ, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _single_turn_messages(prompts: pa.Array) -> pa.Array:
    """``[{"role": "user", "content": p}]`` per prompt (empty list for an empty prompt), built
    column-wise."""
    prompts = prompts.combine_chunks() if isinstance(prompts, pa.ChunkedArray) else prompts
    nonempty = np.asarray(pc.greater(pc.utf8_length(prompts), 0).fill_null(False))
    offsets = np.concatenate([[0], np.cumsum(nonempty)]).astype(np.int32)
    content = prompts.filter(pa.array(nonempty))
    structs = pa.StructArray.from_arrays(
        [pa.array(np.full(len(content), "user", dtype=object), type=pa.string()), content],
        fields=list(MESSAGE_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=pa.list_(MESSAGE_TYPE))


def _missing(col: str, argument: str) -> NoReturn:

    raise RowsError(f"{argument}: required key '{col}' is missing from the rows")


def _require(table: pa.Table, require: tuple[str, ...], argument: str) -> None:
    for c in require:
        if c == "task_id":
            continue
        col = table.column(c)
        if col.null_count:
            i = pc.index(pc.is_null(col), True).as_py()
            raise RowsError(f"{argument}[{i}]: required key '{c}' is missing (None); "
                            f"{col.null_count} rows lack it")


def take_rows(rows: RowsLike, table: pa.Table, keep: Sequence[int]) -> RowsLike:
    """``rows`` restricted to positions ``keep``, in the type they came in (Rows, Arrow table,
    pandas DataFrame or a list of dicts); ``table`` is ``as_table(rows)``, read once by the caller.

    Example:
        >>> data = [{"task_id": "a", "prompt": "p"}, {"task_id": "b", "prompt": "q"}]
        >>> take_rows(data, as_table(data, require=("prompt",)), [1])
        [{'task_id': 'b', 'prompt': 'q'}]
    """
    if isinstance(rows, Rows):
        return Rows(table.take(pa.array(list(keep), type=pa.int64())))
    if isinstance(rows, pa.Table):
        return rows.take(pa.array(list(keep), type=pa.int64()))
    if hasattr(rows, "iloc"):
        return rows.iloc[list(keep)]
    rows = list(rows)
    return [rows[i] for i in keep]
