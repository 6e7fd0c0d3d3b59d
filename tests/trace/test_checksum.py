"""The reader's checksum of a decoded batch is the writer's of the batch it wrote."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.trace import schema


def _reference(batch: pa.RecordBatch) -> str:
    """The format's definition, with the standard library's CRC-32."""
    crc = zlib.crc32(batch.num_rows.to_bytes(8, "little"))
    for column in batch.columns:
        buffers = column.buffers()
        for buffer in buffers[1:] if column.null_count == 0 else buffers:
            if buffer is not None:
                crc = zlib.crc32(memoryview(buffer), crc)
    return f"{crc:08x}"


def _round_trip(batch: pa.RecordBatch, compression: str | None) -> pa.RecordBatch:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as out:
        out.write_batch(batch)
    return pa.ipc.open_stream(sink.getvalue()).read_next_batch()


_values = st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=300)
_texts = st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=300)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    ints=_values,
    texts=_texts,
    taken=st.booleans(),
    compression=st.sampled_from([None, "lz4", "zstd"]),
)
def test_the_decoded_checksum_is_the_written_one(ints, texts, taken, compression):
    n = min(len(ints), len(texts))
    batch = pa.record_batch(
        {"a": pa.array(ints[:n], pa.int64()), "s": pa.array(texts[:n], pa.string())}
    )
    if taken:  # ``take`` leaves an all-valid bitmap on a column without nulls
        batch = batch.take(pa.array(np.arange(n, dtype=np.int64)))
    written = schema.batch_checksum(batch)
    assert written == _reference(batch)
    assert schema.decoded_checksum(_round_trip(batch, compression)) == written


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_a_flipped_byte_of_a_decoded_batch_changes_its_checksum(compression):
    batch = pa.record_batch({"a": pa.array(range(64), pa.int64()), "s": ["x"] * 64})
    decoded = _round_trip(batch, compression)
    values = bytearray(decoded.column("a").buffers()[1].to_pybytes())
    values[17] ^= 0x04
    damaged = pa.record_batch(
        {"a": pa.Array.from_buffers(pa.int64(), 64, [None, pa.py_buffer(bytes(values))]),
         "s": decoded.column("s")}
    )  # fmt: skip
    assert schema.decoded_checksum(damaged) != schema.batch_checksum(batch)
