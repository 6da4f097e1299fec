"""The vectorised range reader: :mod:`..exact`'s exact-range logic over frames parsed in bulk."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_jetstream.core.protocol import ACK_PREFIX, CONSUMER_STALLED_HEADER, status_headers
from airflow_provider_jetstream.core.read.exact import RangePull
from airflow_provider_jetstream.core.read.vectorised.columns import DataFrames, headers_to_map, to_columns
from airflow_provider_jetstream.core.read.vectorised.tap import install

_ACK = ACK_PREFIX.encode()


@dataclass
class ColumnChunk:
    """Messages of one stream in sequence order, as Arrow arrays (what the vectorised reader yields).

    ``headers`` is a ``map<string, list<string>>`` array (every value of a repeated header name),
    or None when headers were not requested. The list-valued properties (``sequences``,
    ``payloads``, ...) convert on access, for tests and small reads.
    """

    subject: pa.Array
    seq: np.ndarray
    timestamp_ns: np.ndarray
    data: pa.Array
    headers_map: pa.Array | None

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def sequences(self) -> list[int]:
        return self.seq.tolist()

    @property
    def subjects(self) -> list[str]:
        return self.subject.to_pylist()

    @property
    def payloads(self) -> list[bytes]:
        return self.data.to_pylist()

    @property
    def timestamps_ns(self) -> list[int]:
        return self.timestamp_ns.tolist()

    @property
    def headers(self) -> list[dict[str, list[str]] | None] | None:
        if self.headers_map is None:
            return None
        return [None if row is None else dict(row) for row in self.headers_map.to_pylist()]


class _Pieces:
    """The chunk being filled: runs of rows, joined when handed over."""

    def __init__(self) -> None:
        self.parts: list[DataFrames] = []
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def build(self, include_headers: bool) -> ColumnChunk:
        parts = self.parts
        if len(parts) == 1:
            one = parts[0]
            subject, seq, stamp, data, raw = one.subjects, one.sequences, one.timestamps_ns, one.payloads, one.headers
        else:
            subject = pa.concat_arrays([p.subjects for p in parts])
            seq = np.concatenate([p.sequences for p in parts])
            stamp = np.concatenate([p.timestamps_ns for p in parts])
            data = pa.concat_arrays([p.payloads for p in parts])
            raw = pa.concat_arrays([p.headers for p in parts]) if include_headers else None
        headers = headers_to_map(raw) if include_headers and raw is not None else None
        return ColumnChunk(subject, seq, stamp, data, headers)


class VectorisedRangePull(RangePull):
    """:class:`~..exact.RangePull` fed by :class:`~.tap.TapParser` with runs of frames instead of messages.

    The consumer, pull requests, statuses, gap and resume handling are the range reader's own code (on
    the consumer engine); only message intake differs, and the order is kept by stream sequence. A run whose
    rows are all "plain" (the next sequences in order, before ``end``, more pending; with a subject filter,
    sequences may jump, from this consumer only) is taken in bulk; any
    other row goes through the same per-message decisions as the nats-py reader.
    """

    def __init__(self, nc: Any, *args: Any) -> None:
        super().__init__(nc, *args)
        self.tap = install(nc)
        self.tapped: int | None = None
        self.replies: set[asyncio.Future[Any]] = set()

    takes_frames_one_by_one = False

    def _new_chunk(self) -> Any:
        return _Pieces()

    def take_ready(self) -> Any:
        chunk = super().take_ready()
        return None if chunk is None else chunk.build(self.include_headers)

    async def listen(self) -> None:
        """Take the pull requests' answers from the tap: the inbox is a normal nats-py subscription whose
        frames never reach nats-py."""
        assert self.requests is not None and self.requests.sub is not None
        self.tapped = self.requests.sub._id
        self.tap.tap(self.tapped, self)

    async def stop(self) -> None:
        if self.tapped is not None:
            self.tap.untap(self.tapped)
            self.tapped = None
        await super().stop()

    # -- frames from the tap ---------------------------------------------------------------

    def on_data(self, bufs: list[bytes], records: np.ndarray) -> None:
        frames = to_columns(bufs, records)
        count = len(frames)
        if self.requests is not None:
            self.requests.received(count)
        start = 0
        while start < count and not (self.finished or self.resume_needed):
            plain = self._plain_prefix(frames, start)
            if plain:
                self._append(frames.slice(start, start + plain))
                start += plain
            if start < count and not (self.finished or self.resume_needed):
                self._one(frames, start)
                start += 1

    def on_other(self, subject: bytes, reply: bytes, header: bytes, payload: bytes) -> None:
        headers = status_headers(header) if header else {}
        stalled = headers.get(CONSUMER_STALLED_HEADER)
        if (reply and not reply.startswith(_ACK)) or stalled:
            # Flow control (a push consumer's, never a pull request's): answer it and go on.
            task = asyncio.ensure_future(self.nc.publish(stalled or reply.decode(), b""))
            self.replies.add(task)
            task.add_done_callback(_forget(self.replies))
            if not stalled:
                return
        requests = self.requests
        if requests is None or subject.decode() != requests.inbox:
            return
        requests.react_to_block(header)

    def _plain_prefix(self, frames: DataFrames, start: int) -> int:
        seq = frames.sequences[start:]
        if self.consumer is None:
            return 0
        if self.filter_subjects:
            # Sequences may jump here; as in the nats-py reader, a jump counts only from this consumer.
            previous = np.concatenate(([self.next_seq - 1], seq[:-1]))
            good = (seq > previous) & frames.consumer_is(self.consumer, start)
        else:
            good = seq == self.next_seq + np.arange(len(seq))
        good &= (seq < self.end) & ~frames.drained[start:]
        return len(seq) if good.all() else int(np.argmin(good))

    def _one(self, frames: DataFrames, row: int) -> None:
        """One row by the nats-py reader's per-message rules."""
        seq = int(frames.sequences[row])
        if seq != self.next_seq and not self._in_order(seq, frames.consumer(row)):
            return
        self._append(frames.slice(row, row + 1))
        if seq >= self.end:
            self._complete(None)
        elif frames.drained[row]:
            if not self.filter_subjects:
                self._lost(seq + 1, self.end)
            self._complete(None)

    def _append(self, rows: DataFrames) -> None:
        """Add rows to the chunk being filled, handing chunks over at their message and byte bounds."""
        while len(rows):
            chunk = self.chunk
            room = self.chunk_messages - chunk.count
            cumulative = np.cumsum(rows.sizes)
            # The chunk ends at the row whose bytes reach the bound (that row included).
            by_bytes = int(np.searchsorted(cumulative, self.chunk_max_bytes - self.chunk_bytes, side="left")) + 1
            take = min(room, by_bytes, len(rows))
            part = rows.slice(0, take) if take < len(rows) else rows
            chunk.parts.append(part)
            chunk.count += take
            self.buffered += take
            self.chunk_bytes += int(cumulative[take - 1])
            self.next_seq = int(part.sequences[-1]) + 1
            if chunk.count >= self.chunk_messages or self.chunk_bytes >= self.chunk_max_bytes:
                self.ready.append(chunk)
                self.chunk = self._new_chunk()
                self.chunk_bytes = 0
                self.wakeup.set()
            rows = rows.slice(take, len(rows))
        if self.finished:
            self.wakeup.set()


def _forget(tasks: set[asyncio.Future[Any]]) -> Any:
    def done(task: asyncio.Future[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()

    return done
