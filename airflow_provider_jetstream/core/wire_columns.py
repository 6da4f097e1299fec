"""Frame offsets (from :mod:`.wire`) to Arrow columns, vectorised: no Python object per message."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_jetstream.core.wire import RECORD_FIELDS

#: Arrow type of the headers column: every value of a repeated header name, in order.
HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))
_PAD = b"\0" * 16
_INLINE = np.arange(12)


@dataclass
class DataFrames:
    """A run of JetStream data messages, column by column (Arrow arrays, numpy for numbers).

    ``sequences``, ``timestamps_ns``, ``pending`` and ``sizes`` are numpy int64 arrays;
    ``consumers`` the consumer name of each ack reply; ``headers`` the raw header blocks (null
    for messages without headers).
    """

    subjects: pa.Array
    sequences: np.ndarray
    timestamps_ns: np.ndarray
    pending: np.ndarray
    consumers: pa.Array
    payloads: pa.Array
    headers: pa.Array
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.sequences)

    def slice(self, start: int, stop: int) -> DataFrames:
        """Rows ``[start, stop)``."""
        return DataFrames(
            self.subjects.slice(start, stop - start),
            self.sequences[start:stop],
            self.timestamps_ns[start:stop],
            self.pending[start:stop],
            self.consumers.slice(start, stop - start),
            self.payloads.slice(start, stop - start),
            self.headers.slice(start, stop - start),
            self.sizes[start:stop],
        )


def _rows(blob: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``blob[start:start+width]`` for each start, as rows of a 2-D array (one row copy each)."""
    return np.lib.stride_tricks.sliding_window_view(blob, width)[starts]


def _views(blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Arrow binary-view structs (16 bytes each) for ``blob[start:start+length]``."""
    count = len(starts)
    views = np.zeros((count, 16), np.uint8)
    inline = _rows(blob, starts, 12)
    short = lengths <= 12
    if short.any():
        inline[short] *= (lengths[short, None] > _INLINE).astype(np.uint8)
    views[:, 4:] = inline
    words = views.view(np.int32)
    words[:, 0] = lengths
    long_rows = ~short
    words[long_rows, 2] = 0
    words[long_rows, 3] = starts[long_rows]
    return views


def _binary(blob_np: np.ndarray, blob: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, kind: str) -> pa.Array:
    views = _views(blob_np, starts, lengths)
    view_type = pa.string_view() if kind == "string" else pa.binary_view()
    array = pa.Array.from_buffers(view_type, len(starts), [None, pa.py_buffer(views), blob])
    return array.cast(pa.string() if kind == "string" else pa.binary())


def to_columns(bufs: list[tuple[bytes, int]], records: list[int]) -> DataFrames:
    """Columns of the data frames that :func:`.wire.split_frames` recorded."""
    rec = np.array(records, np.int64).reshape(-1, RECORD_FIELDS)
    count = len(rec)
    blob_bytes = b"".join(b for b, _ in bufs)
    if len(blob_bytes) >= 2**31:
        raise ValueError("a run of frames over 2 GiB")
    bases = np.zeros(len(bufs), np.int64)
    np.cumsum([len(b) for b, _ in bufs[:-1]], out=bases[1:])
    firsts = np.array([first for _, first in bufs] + [count], np.int64)
    base = np.repeat(bases, np.diff(firsts))
    blob_np = np.frombuffer(blob_bytes + _PAD, np.uint8)
    blob = pa.py_buffer(blob_bytes)
    start, s1, s2, r_end, eol, hsize, size = (rec[:, i] + (base if i < 5 else 0) for i in range(RECORD_FIELDS))
    subjects = _binary(blob_np, blob, start, s1 - start, "string")
    payloads = _binary(blob_np, blob, eol + 2 + hsize, size - hsize, "binary")
    has_headers = hsize > 0
    if has_headers.any():
        headers = _binary(blob_np, blob, eol + 2, hsize, "binary")
        headers = pc.if_else(pa.array(has_headers), headers, pa.scalar(None, pa.binary()))
    else:
        headers = pa.nulls(count, pa.binary())
    replies = _binary(blob_np, blob, s2 + 1, r_end - s2 - 1, "string")
    sequences, timestamps, pending, consumers = parse_ack_replies(replies)
    return DataFrames(subjects, sequences, timestamps, pending, consumers, payloads, headers, size - hsize)


def parse_ack_replies(replies: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array]:
    """Stream sequence, timestamp (ns), pending count and consumer name of each ack reply subject.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (v1, 9 tokens), or with
    ``<domain>.<account hash>`` after ``ACK`` (v2, 11 tokens, 12 with a trailing random token).
    """
    tokens = pc.split_pattern(replies, ".")
    counts = pc.list_value_length(tokens).to_numpy(zero_copy_only=False)
    if not np.isin(counts, (9, 11, 12)).all():
        bad = replies[int(np.flatnonzero(~np.isin(counts, (9, 11, 12)))[0])]
        raise ValueError(f"unexpected JetStream ack reply subject {bad}")
    offsets = tokens.offsets.to_numpy()[:-1].astype(np.int64) + np.where(counts >= 11, 2, 0)
    flat = tokens.values

    def number(index: int) -> np.ndarray:
        return pc.cast(flat.take(pa.array(offsets + index)), pa.int64()).to_numpy()

    consumers = flat.take(pa.array(offsets + 3))
    return number(5), number(7), number(8), consumers


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
