"""Data frame rows (from :mod:`.tap`) to Arrow columns, vectorised: no Python object per message."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_jetstream.core.protocol import parse_ack_reply
from airflow_provider_jetstream.core.read.vectorised.scan import (
    CONSUMER,
    CONSUMER_LEN,
    FIRST_BYTES,
    HEADER_SIZE,
    LINE_END,
    PENDING,
    PENDING_END,
    REPLY_END,
    SEQUENCE,
    SID_END,
    SIZE,
    SUBJECT,
    SUBJECT_END,
    TIMESTAMP_END,
    unaligned_words,
    unexpected_ack_reply,
)

#: Arrow type of the headers column: every value of a repeated header name, in order.
HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))


@dataclass
class DataFrames:
    """A run of JetStream data messages, column by column (Arrow arrays, numpy for numbers).

    ``sequences``, ``timestamps_ns`` and ``sizes`` are numpy int64 arrays, ``drained`` a numpy
    bool array (the ack reply's pending count is 0: nothing more is stored after that message);
    ``headers`` the raw header blocks (null for messages without headers); the consumer name of
    each ack reply is read with :meth:`consumer` and :meth:`consumer_is`.
    """

    subjects: pa.Array
    sequences: np.ndarray
    timestamps_ns: np.ndarray
    drained: np.ndarray
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
        last = len(words) - 1
        for offset in sorted({*range(0, len(wanted) - 7, 8), max(len(wanted) - 8, 0)}):
            piece = wanted[offset : offset + 8]
            mask = FIRST_BYTES[len(piece)]
            # A row whose name is shorter may end near the buffer's end: its words are read in bounds
            # (its length already tells it is not this consumer).
            positions = np.minimum(starts + offset, last)
            same &= (words[positions] & mask) == np.frombuffer(piece.ljust(8, b"\0"), "<u8")[0]
        return same

    def slice(self, start: int, stop: int) -> DataFrames:
        """Rows ``[start, stop)``."""
        return DataFrames(
            self.subjects.slice(start, stop - start),
            self.sequences[start:stop],
            self.timestamps_ns[start:stop],
            self.drained[start:stop],
            self.payloads.slice(start, stop - start),
            self.headers.slice(start, stop - start),
            self.sizes[start:stop],
            self.blob,
            self.consumer_starts[start:stop],
            self.consumer_lengths[start:stop],
        )


def _spaced(blob: pa.Buffer, bounds: np.ndarray) -> pa.Array:
    """A large binary array over ``blob`` whose even elements are ``blob[begin:end]`` for each
    ``(begin, end)`` row of ``bounds`` (in increasing order, not overlapping) and whose odd
    elements (the bytes between two wanted ones) are null. No copy."""
    count = len(bounds)
    offsets = np.empty(2 * count + 1, np.int64)
    offsets[:-1].reshape(count, 2)[...] = bounds
    offsets[-1] = offsets[-2] if count else 0
    every_other = pa.py_buffer(np.full((2 * count + 7) // 8, 0x55, np.uint8))
    return pa.Array.from_buffers(pa.large_binary(), 2 * count, [every_other, pa.py_buffer(offsets), blob], count)


def _slices(blob: pa.Buffer, bounds: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """``blob[begin:end]`` for each ``(begin, end)`` row of ``bounds`` (as :func:`_spaced`), as an
    Arrow array of ``value_type`` (binary or string): dropping the nulls of :func:`_spaced` copies the
    wanted bytes out in one Arrow call, and a cast gives them their type."""
    return pc.drop_null(_spaced(blob, bounds)).cast(value_type)


def _sequences_and_timestamps(blob: pa.Buffer, records: np.ndarray) -> np.ndarray:
    """The stream sequence and timestamp of each row's ack reply, found by the scan: int64, 2 columns.

    In bulk, one Arrow cast; when a row's numbers do not parse, the reply is read by the one ack-reply
    parser (:func:`~airflow_provider_jetstream.core.protocol.parse_ack_reply`) to say which one is wrong.
    """
    try:
        # Cast as spaced: Arrow parses only the valid (even) elements, and nothing is copied first.
        values = _spaced(blob, records[:, SEQUENCE : TIMESTAMP_END + 1].reshape(-1, 2)).cast(pa.int64())
    except pa.ArrowInvalid:
        raw = blob.to_pybytes()
        for row in records:
            reply = raw[row[SID_END] + 1 : row[REPLY_END]]
            if parse_ack_reply(reply.decode("utf-8", "replace")) is None:
                raise unexpected_ack_reply(reply) from None
        raise
    # The values buffer as is (to_numpy() goes element by element when a validity bitmap is present),
    # its even elements.
    parsed = np.frombuffer(values.buffers()[1], np.int64, len(values), values.offset * 8)
    return parsed[::2].reshape(-1, 2)


def to_columns(bufs: list[bytes], records: np.ndarray) -> DataFrames:
    """Columns of the data frames :func:`.tap.split_frames` recorded (offsets into ``bufs`` joined)."""
    blob_bytes = bufs[0] if len(bufs) == 1 else b"".join(bufs)
    blob = pa.py_buffer(blob_bytes)
    eol, hsize, size = records[:, LINE_END], records[:, HEADER_SIZE], records[:, SIZE]
    subjects = _slices(blob, records[:, SUBJECT : SUBJECT_END + 1], pa.string())
    body = eol + 2 + hsize
    payloads = _slices(blob, np.stack((body, body + size - hsize), axis=1), pa.binary())
    has_headers = hsize > 0
    if has_headers.any():
        headers = _slices(blob, np.stack((eol + 2, body), axis=1), pa.binary())
        headers = pc.if_else(pa.array(has_headers), headers, pa.scalar(None, pa.binary()))
    else:
        headers = pa.nulls(len(records), pa.binary())
    numbers = _sequences_and_timestamps(blob, records)
    blob_np = np.frombuffer(blob_bytes, np.uint8)
    # As the nats-py reader: a pending count of "0", not parsed.
    drained = (records[:, PENDING_END] - records[:, PENDING] == 1) & (blob_np[records[:, PENDING]] == ord("0"))
    return DataFrames(
        subjects,
        numbers[:, 0],
        numbers[:, 1],
        drained,
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
