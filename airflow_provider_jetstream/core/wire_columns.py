"""Data frame rows (from :mod:`.wire`) to Arrow columns, vectorised: no Python object per message."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_jetstream.core.wire_scan import (
    CONSUMER,
    CONSUMER_LEN,
    FIRST_BYTES,
    HEADER_SIZE,
    LINE_END,
    PENDING,
    SEQUENCE,
    SIZE,
    SUBJECT,
    SUBJECT_END,
    TIMESTAMP,
    unaligned_words,
)

#: Arrow type of the headers column: every value of a repeated header name, in order.
HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))
_PAD = b"\0" * 16


@dataclass
class DataFrames:
    """A run of JetStream data messages, column by column (Arrow arrays, numpy for numbers).

    ``sequences``, ``timestamps_ns``, ``pending`` and ``sizes`` are numpy int64 arrays;
    ``headers`` the raw header blocks (null for messages without headers); the consumer name of
    each ack reply is read with :meth:`consumer` and :meth:`consumer_is`.
    """

    subjects: pa.Array
    sequences: np.ndarray
    timestamps_ns: np.ndarray
    pending: np.ndarray
    payloads: pa.Array
    headers: pa.Array
    sizes: np.ndarray
    blob: np.ndarray
    consumer_starts: np.ndarray
    consumer_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.sequences)

    def consumer(self, row: int) -> str:
        """The consumer name in row ``row``'s ack reply."""
        start = int(self.consumer_starts[row])
        return self.blob[start : start + int(self.consumer_lengths[row])].tobytes().decode()

    def consumer_is(self, name: str, start: int = 0) -> np.ndarray:
        """Whether each row from ``start`` on was delivered by consumer ``name``."""
        wanted = name.encode()
        same = self.consumer_lengths[start:] == len(wanted)
        starts = self.consumer_starts[start:]
        # 8 bytes at a time (the last group overlaps the one before it; a name under 8 bytes masked).
        words = unaligned_words(self.blob, 8)
        for offset in sorted({*range(0, len(wanted) - 7, 8), max(len(wanted) - 8, 0)}):
            piece = wanted[offset : offset + 8]
            mask = FIRST_BYTES[len(piece)]
            same &= (words[starts + offset] & mask) == np.frombuffer(piece.ljust(8, b"\0"), "<u8")[0]
        return same

    def slice(self, start: int, stop: int) -> DataFrames:
        """Rows ``[start, stop)``."""
        return DataFrames(
            self.subjects.slice(start, stop - start),
            self.sequences[start:stop],
            self.timestamps_ns[start:stop],
            self.pending[start:stop],
            self.payloads.slice(start, stop - start),
            self.headers.slice(start, stop - start),
            self.sizes[start:stop],
            self.blob,
            self.consumer_starts[start:stop],
            self.consumer_lengths[start:stop],
        )


def _views(blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Arrow binary-view structs (16 bytes each) for ``blob[start:start+length]``.

    As two little-endian words: the length and the first 4 bytes, then either bytes 4-11 (a
    value of up to 12 bytes is inline, zero-padded) or buffer 0 and the offset.
    """
    sizes = lengths.astype(np.uint64)
    views = np.empty((len(starts), 2), np.uint64)
    first4 = unaligned_words(blob, 4)[starts] & FIRST_BYTES[np.minimum(lengths, 4)]
    views[:, 0] = sizes | (first4.astype(np.uint64) << np.uint64(32))
    short = lengths <= 12
    if short.all():
        views[:, 1] = unaligned_words(blob, 8)[starts + 4] & FIRST_BYTES[np.maximum(lengths, 4) - 4]
    else:
        views[:, 1] = starts.astype(np.uint64) << np.uint64(32)
        if short.any():
            rows = starts[short] + 4
            views[short, 1] = unaligned_words(blob, 8)[rows] & FIRST_BYTES[np.maximum(lengths[short], 4) - 4]
    return views


def _binary(blob_np: np.ndarray, blob: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, kind: str) -> pa.Array:
    views = _views(blob_np, starts, lengths)
    view_type = pa.string_view() if kind == "string" else pa.binary_view()
    array = pa.Array.from_buffers(view_type, len(starts), [None, pa.py_buffer(views), blob])
    return array.cast(pa.string() if kind == "string" else pa.binary())


def to_columns(bufs: list[bytes], records: np.ndarray) -> DataFrames:
    """Columns of the data frames :func:`.wire.split_frames` recorded (offsets into ``bufs`` joined)."""
    count = len(records)
    blob_bytes = b"".join([*bufs, _PAD])
    if len(blob_bytes) >= 2**31:
        raise ValueError("a run of frames over 2 GiB")
    blob_np = np.frombuffer(blob_bytes, np.uint8)
    blob = pa.py_buffer(blob_bytes)
    start, eol, hsize, size = records[:, SUBJECT], records[:, LINE_END], records[:, HEADER_SIZE], records[:, SIZE]
    subjects = _binary(blob_np, blob, start, records[:, SUBJECT_END] - start, "string")
    payloads = _binary(blob_np, blob, eol + 2 + hsize, size - hsize, "binary")
    has_headers = hsize > 0
    if has_headers.any():
        headers = _binary(blob_np, blob, eol + 2, hsize, "binary")
        headers = pc.if_else(pa.array(has_headers), headers, pa.scalar(None, pa.binary()))
    else:
        headers = pa.nulls(count, pa.binary())
    return DataFrames(
        subjects,
        records[:, SEQUENCE],
        records[:, TIMESTAMP],
        records[:, PENDING],
        payloads,
        headers,
        size - hsize,
        blob_np,
        records[:, CONSUMER],
        records[:, CONSUMER_LEN],
    )


def headers_to_map(raw: pa.Array) -> pa.Array:
    """Raw header blocks (``NATS/1.0\\r\\nName: value\\r\\n...``, null for none) as
    ``map<name, [values]>``: every value of a repeated name in wire order, names in order of first
    appearance, names and values stripped of surrounding blanks; null when a block has no header."""
    count = len(raw)
    if raw.null_count == count:
        return pa.nulls(count, HEADERS_TYPE)
    text = pc.cast(pc.fill_null(raw, b""), pa.string())
    lines = pc.split_pattern(text, "\r\n")
    parents = pc.list_parent_indices(lines).to_numpy()
    flat = pc.list_flatten(lines)
    line_offsets = lines.offsets.to_numpy()
    index_in_row = np.arange(len(flat)) - line_offsets[parents]
    parts = pc.split_pattern(flat, ":", max_splits=1)
    keep = (index_in_row > 0) & (pc.list_value_length(parts).to_numpy(zero_copy_only=False) == 2)
    keep_idx = pa.array(np.flatnonzero(keep))
    parts = parts.take(keep_idx)
    parents = parents[keep]
    names = pc.utf8_trim_whitespace(pc.list_element(parts, 0))
    values = pc.utf8_trim_whitespace(pc.list_element(parts, 1))
    named = pc.greater(pc.utf8_length(names), 0).to_numpy(zero_copy_only=False)
    if not named.all():
        pick = pa.array(np.flatnonzero(named))
        names, values, parents = names.take(pick), values.take(pick), parents[named]
    if len(names) == 0:
        return pa.nulls(count, HEADERS_TYPE)
    codes = pc.dictionary_encode(names).indices.to_numpy().astype(np.int64)
    keys = parents.astype(np.int64) * (int(codes.max()) + 1) + codes
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # groups in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    line_rank = rank[inverse.reshape(-1)]
    perm = np.argsort(line_rank, kind="stable")
    group_sizes = np.bincount(line_rank, minlength=len(order))
    value_offsets = np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int32)
    items = pa.ListArray.from_arrays(pa.array(value_offsets), values.take(pa.array(perm)))
    group_first = first[order]
    group_keys = names.take(pa.array(group_first))
    per_row = np.bincount(parents[group_first], minlength=count)
    map_offsets = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int32)
    mask = pa.array(per_row == 0)
    return pa.MapArray.from_arrays(pa.array(map_offsets), group_keys, items, type=HEADERS_TYPE, mask=mask)
