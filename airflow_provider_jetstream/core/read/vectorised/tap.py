"""NATS wire framing in bulk: the pull inbox's MSG/HMSG frames taken from nats-py's read loop.

Why this hook. nats-py 2.16 reads the socket in ``Client._read_loop``
(``b = await self._transport.read(DEFAULT_BUFFER_SIZE); await self._ps.parse(b)``) and its
``Parser.parse`` builds a ``Msg``, runs ``_process_msg`` and queues it, once per message: Python
work per message, which is what this module avoids. Everything else nats-py does (connect, every
auth method, TLS and mutual TLS, server discovery, reconnects, PING/PONG, ``-ERR``,
request/reply) happens either before the read loop starts or through that same ``parse`` call.
So :class:`TapParser` replaces the client's ``_ps`` with a ``Parser`` subclass. It finds the
MSG/HMSG frames of *tapped* subscription ids whose reply is a JetStream ack reply with numpy over
the whole buffer
(:func:`~airflow_provider_jetstream.core.read.vectorised.scan.scan_data_frames`: no Python step per frame),
keeps those that chain from a known frame boundary, records them as rows of integers (offsets into
the received buffers and sizes), and hands every other frame, byte for byte, to nats-py's own
``Parser.parse`` in order. The subscription itself is a normal nats-py subscription (so
reconnects re-subscribe it); only its frames never reach nats-py. The hooks used are the ``_ps``
attribute and the ``Parser`` class (stable since nats-py 2.0), and ``Parser.reset`` (called by
nats-py on reconnect) clears the partial frame here too.

Bulk work has a fixed cost per call, however few frames a scan finds, so while a subscription is
tapped, reads of bulk data (:data:`BULK_READ` bytes or more, and any read once some are held) are
held and scanned together, up to ``hold_bytes`` (default 1 MiB) or ``hold_seconds`` (default 20 ms)
after the first one. A smaller read with nothing held (a PONG, an API reply, a heartbeat) and an
empty one (the socket closed) are handed over at once. The time limit is for data that arrives
slower than the reader can take it, such as a read through a hub: waiting lets one scan take more
frames. A fast stream fills ``hold_bytes`` first.

Rows become Arrow columns in :mod:`airflow_provider_jetstream.core.read.vectorised.columns`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import numpy as np
from nats.aio.client import Client
from nats.protocol.parser import AWAITING_MSG_PAYLOAD, Parser

from airflow_provider_jetstream.core.read.vectorised.scan import (
    ACK_PREFIX,
    OFFSET_FIELDS,
    scan_data_frames,
    unexpected_ack_reply,
)

#: Reads of at least this many bytes are bulk data: held while a subscription is tapped.
BULK_READ = 4096


class FrameSink(Protocol):
    """Receives the frames of one tapped subscription, in wire order."""

    def on_data(self, bufs: list[bytes], records: np.ndarray) -> None:
        """A run of data frames (reply ``$JS.ACK...``): ``records`` has one row of
        :data:`~airflow_provider_jetstream.core.read.vectorised.scan.RECORD_FIELDS` int64 per frame, its offsets
        into ``b"".join(bufs)``."""

    def on_other(self, subject: bytes, reply: bytes, header: bytes, payload: bytes) -> None:
        """A frame without an ack reply: a status (heartbeat, 404/408/409, flow control...)."""


class _Tap:
    __slots__ = ("base", "bufs", "current", "pieces", "sink", "size")

    def __init__(self, sink: FrameSink) -> None:
        self.sink = sink
        self.bufs: list[bytes] = []
        self.pieces: list[np.ndarray] = []
        self.current: bytes | None = None
        self.size = self.base = 0

    def add(self, buf: bytes, records: np.ndarray) -> None:
        """Rows of frames in ``buf`` (offsets into ``buf``; shifted here into the joined buffers)."""
        if self.current is not buf:
            self.current, self.base = buf, self.size
            self.bufs.append(buf)
            self.size += len(buf)
        if self.base:
            records[:, :OFFSET_FIELDS] += self.base
        self.pieces.append(records)

    def flush(self) -> None:
        pieces, bufs = self.pieces, self.bufs
        self.bufs, self.pieces, self.current, self.size, self.base = [], [], None, 0, 0
        if pieces:
            self.sink.on_data(bufs, pieces[0] if len(pieces) == 1 else np.concatenate(pieces))


class _Runs:
    """The tapped data frames of one buffer, found in bulk, taken a run of back-to-back frames of
    one subscription at a time from an offset where a frame is known to start."""

    def __init__(self, buf: bytes, taps: dict[bytes, _Tap]) -> None:
        self.buf = buf
        self.taps = list(taps.values())
        starts, self.ends, self.records, self.which = scan_data_frames(buf, list(taps))
        self.starts: list[int] = starts.tolist()
        chained = (starts[1:] == self.ends[:-1]) & (self.which[1:] == self.which[:-1])
        self.tails = np.append(np.flatnonzero(~chained), len(starts) - 1)
        self.next = 0

    def next_start(self, pos: int) -> int:
        """The first found frame's start at or after ``pos`` (-1: none)."""
        starts, i = self.starts, self.next
        while i < len(starts) and starts[i] < pos:
            i += 1  # a candidate inside a payload
        self.next = i
        return starts[i] if i < len(starts) else -1

    def take(self) -> int:
        """Hand the run starting at :meth:`next_start` to its tap; returns the offset after it."""
        i = self.next
        last = int(self.tails[np.searchsorted(self.tails, i)])
        self.taps[int(self.which[i])].add(self.buf, self.records[i : last + 1])
        self.next = last + 1
        return int(self.ends[last])


class TapParser(Parser):
    """nats-py's parser, except that frames of tapped subscription ids go to a :class:`FrameSink`.

    :param nc: the client whose parser this replaces (see :func:`install`).
    :param hold_bytes: bytes of reads held, at most, before they are scanned together. Default 1 MiB.
    :param hold_seconds: how long the first held read waits at most. Default 0.02.
    """

    def __init__(self, nc: Any = None, hold_bytes: int = 1 << 20, hold_seconds: float = 0.02) -> None:
        self._taps: dict[bytes, _Tap] = {}
        self._rest = b""
        self._raw_left = 0
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._hold_bytes = hold_bytes
        self._hold_seconds = hold_seconds
        self._timer: asyncio.TimerHandle | None = None
        self._release_task: asyncio.Future[None] | None = None
        self._lock = asyncio.Lock()
        super().__init__(nc)

    def reset(self) -> None:
        """nats-py calls this on (re)connect: a partial frame of the old socket is dropped.

        Held reads of the old socket are split now: their tapped frames reach the sinks, the
        others are dropped (the connection they answered is gone)."""
        super().reset()
        self._cancel_timer()
        if self._held:
            buf = b"".join([self._rest, *self._held])
            split_frames(buf, self._taps)
        self._rest, self._held, self._held_bytes, self._raw_left = b"", [], 0, 0
        self.flush()

    def take_over(self, old: Parser) -> None:
        """Continue where ``old`` stopped (a frame may be half read)."""
        if old.state == AWAITING_MSG_PAYLOAD:
            # nats-py holds the control line of a frame for another subscription: the rest of
            # that frame goes to it untouched.
            self.buf, self.state, self.needed = old.buf, old.state, old.needed
            self.header_needed, self.msg_arg = old.header_needed, old.msg_arg
            self._raw_left = old.needed + 2 - len(old.buf)
        else:
            self._rest = bytes(old.buf)

    def tap(self, sid: int, sink: FrameSink) -> None:
        """Send the frames of subscription ``sid`` to ``sink`` from now on."""
        self._taps[str(sid).encode()] = _Tap(sink)

    def untap(self, sid: int) -> None:
        """Stop tapping ``sid``: frames not yet handed over are dropped, later ones go to nats-py
        (which drops them once unsubscribed)."""
        self._taps.pop(str(sid).encode(), None)

    def flush(self) -> None:
        """Hand every recorded data frame to its sink now."""
        for tap in list(self._taps.values()):
            tap.flush()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _release(self) -> None:
        self._timer = None
        if self._held:
            self._release_task = asyncio.ensure_future(self._release_held())

    async def _release_held(self) -> None:
        async with self._lock:
            if self._held:
                await self._split(b"")

    async def parse(self, data: bytes = b"") -> None:
        async with self._lock:
            released, self._release_task = self._release_task, None
            if released is not None and released.done() and not released.cancelled() and released.exception():
                raise released.exception()  # type: ignore[misc]  # to nats-py's read loop, as if read now
            if self._raw_left:
                head, data = data[: self._raw_left], data[self._raw_left :]
                self._raw_left -= len(head)
                await super().parse(head)
                if not data:
                    return
            bulk = self._held or len(data) >= BULK_READ
            if self._taps and data and bulk and self._held_bytes + len(data) < self._hold_bytes:
                self._held.append(data)
                self._held_bytes += len(data)
                if self._timer is None:
                    self._timer = asyncio.get_running_loop().call_later(self._hold_seconds, self._release)
                return
            await self._split(data)

    async def _split(self, data: bytes) -> None:
        self._cancel_timer()
        if self._held:
            buf = b"".join([self._rest, *self._held, data])
            self._held, self._held_bytes = [], 0
        else:
            buf = self._rest + data if self._rest else bytes(data)
        passthrough, pos = split_frames(buf, self._taps)
        self._rest = buf[pos:]
        self.flush()
        if passthrough:
            await super().parse(b"".join(passthrough))


def split_frames(buf: bytes, taps: dict[bytes, _Tap]) -> tuple[list[bytes], int]:
    """Split ``buf`` into frames: tapped data frames are recorded on their tap (found in bulk),
    tapped statuses go to the sink, the other frames are collected whole for nats-py.

    Returns the frames for nats-py and the offset of the first incomplete frame.
    """
    passthrough: list[bytes] = []
    n = len(buf)
    pos = 0
    runs = _Runs(buf, taps) if taps else None
    next_run = runs.next_start(0) if runs else -1
    find, rfind, startswith = buf.find, buf.rfind, buf.startswith
    while pos < n:
        if pos == next_run:
            pos = runs.take()  # type: ignore[union-attr]
            next_run = runs.next_start(pos)  # type: ignore[union-attr]
            continue
        eol = find(b"\r\n", pos)
        if eol < 0:
            break
        op = buf[pos]
        if op == 77 or op == 72:  # MSG / HMSG
            start = pos + 4 if op == 77 else pos + 5
            s1 = find(b" ", start, eol)
            s2 = find(b" ", s1 + 1, eol)
            sp = rfind(b" ", s2, eol)
            if s1 < 0 or s2 < 0:
                raise ValueError(f"malformed NATS frame: {buf[pos:eol][:200]!r}")
            size = int(buf[sp + 1 : eol])
            if op == 72:
                r_end = rfind(b" ", s2, sp)
                hsize = int(buf[r_end + 1 : sp])
            else:
                r_end, hsize = sp, 0
            end = eol + 4 + size
            if end > n:
                break
            tap = taps.get(buf[s1 + 1 : s2])
            if tap is None:
                passthrough.append(buf[pos:end])
            elif r_end > s2 and startswith(ACK_PREFIX, s2 + 1):
                # Every well-formed one was found in bulk.
                raise unexpected_ack_reply(buf[s2 + 1 : r_end])
            else:
                tap.flush()
                tap.sink.on_other(
                    buf[start:s1], buf[s2 + 1 : r_end] if r_end > s2 else b"",
                    buf[eol + 2 : eol + 2 + hsize], buf[eol + 2 + hsize : end - 2],
                )  # fmt: skip
            pos = end
        else:
            passthrough.append(buf[pos : eol + 2])
            pos = eol + 2
        if 0 <= next_run < pos:
            next_run = runs.next_start(pos)  # type: ignore[union-attr]
    return passthrough, pos


def install(nc: Client) -> TapParser:
    """Make ``nc`` read through a :class:`TapParser` (once; later calls return the same one).

    Transparent for everything not tapped: it can stay installed for the client's life.
    """
    current = nc._ps
    if isinstance(current, TapParser):
        return current
    parser = TapParser(nc)
    parser.take_over(current)
    nc._ps = parser
    return parser
