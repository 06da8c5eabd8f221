"""table_checksum's memory: what it holds at once is bounded by a chunk of rows, not the
table (issue 50: hashing the built 400k-row table took a cold run from ~712 to ~970 MiB)."""

import sys
import tracemalloc
from unittest import mock

import pyarrow as pa

from assay.rows import table_checksum

_rows = sys.modules["assay.rows"]  # assay.rows is also the name of a function


def _table(n: int) -> pa.Table:
    # the columns a built table is made of: repeated prompts (the dictionary path), distinct
    # answers, rewards, markers, one-turn messages and JSON text
    msgs = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    return pa.table({
        "prompt": [f"question {i // 8} " + "x" * 40 for i in range(n)],
        "final_text": [f"answer {i} " + "y" * 60 for i in range(n)],
        "reward": [float(i % 2) for i in range(n)],
        "markers": pa.array([[("len", float(i))] for i in range(n)],
                            pa.map_(pa.string(), pa.float64())),
        "messages": pa.array([[{"role": "user", "content": f"question {i // 8}"}]
                              for i in range(n)], msgs),
        "meta": [f'{{"k": {i}}}' for i in range(n)],
    })


def _peak(table: pa.Table) -> int:
    tracemalloc.start()
    try:
        table_checksum(table, "rows")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_checksum_peak_does_not_grow_with_the_table():
    # The same chunk size at 8k and 32k rows: the Python memory held while hashing (strings,
    # values) stays that of a chunk. Hashing each column as one string held 4x more at 4x the
    # rows (measured ~3.9x); chunked, the ratio is ~1 (the Arrow buffers are made before
    # tracing starts and Arrow's own pool is not traced).
    small, large = _table(8_000), _table(32_000)
    with mock.patch.object(_rows, "_CHUNK", 2_000, create=True):
        _peak(small)  # warm caches (json's, Arrow's kernels) before measuring
        p_small, p_large = _peak(small), _peak(large)
    assert p_large < 1.5 * p_small, (p_small, p_large)
