"""NATS wire framing in bulk: the pull inbox's MSG/HMSG frames taken from nats-py's read loop.

Why this hook. nats-py 2.16 reads the socket in ``Client._read_loop``
(``b = await self._transport.read(DEFAULT_BUFFER_SIZE); await self._ps.parse(b)``) and its
``Parser.parse`` builds a ``Msg``, runs ``_process_msg`` and queues it, once per message: ~80 % of
the fast path's CPU. Everything else nats-py does (connect, every auth method, TLS and mutual TLS,
server discovery, reconnects, PING/PONG, ``-ERR``, request/reply) happens either before the read
loop starts or through that same ``parse`` call. So :class:`TapParser` replaces the client's
``_ps`` with a ``Parser`` subclass. It finds the MSG/HMSG frames of *tapped* subscription ids
whose reply is a JetStream ack reply with numpy over the whole buffer (:func:`scan_data_frames`:
no Python step per frame), records them as rows of integers (offsets into the received buffers,
and the sequence, timestamp and pending count from the ack reply), and hands every other frame,
byte for byte, to nats-py's own ``Parser.parse`` in order. The subscription itself is a normal
nats-py subscription (so reconnects re-subscribe it); only its frames never reach nats-py. The
hooks used are the ``_ps`` attribute and the ``Parser`` class (stable since nats-py 2.0), and
``Parser.reset`` (called by nats-py on reconnect) clears the partial frame here too.

Bulk work has a fixed cost per call, so while a subscription is tapped, full reads (nats-py's
32 KiB, which means more bytes are waiting) are held and scanned together, up to ``hold_bytes``
or ``hold_seconds`` after the first one; a shorter read (the socket is drained) releases them at
once.

Rows become Arrow columns in :mod:`airflow_provider_jetstream.core.wire_columns`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import numpy as np
from nats.aio.client import DEFAULT_BUFFER_SIZE, Client
from nats.protocol.parser import AWAITING_MSG_PAYLOAD, Parser

#: The columns of a data frame row. The first :data:`OFFSET_FIELDS` are byte offsets into the
#: buffers handed over with it: subject start and end, sid end, reply end, control line end (its
#: CR) and the consumer name's start in the ack reply. Then header size and total size (0 and the
#: payload size without headers), the consumer name's length, and from the ack reply the stream
#: sequence, the timestamp (ns) and the pending count.
(SUBJECT, SUBJECT_END, SID_END, REPLY_END, LINE_END, CONSUMER,
 HEADER_SIZE, SIZE, CONSUMER_LEN, SEQUENCE, TIMESTAMP, PENDING) = range(12)  # fmt: skip
RECORD_FIELDS = 12
OFFSET_FIELDS = 6
_ACK = b"$JS.ACK."
# Little-endian words of the bytes they stand for.
_ACK_WORD = np.frombuffer(_ACK, "<u8")[0]
_MSG_WORD = np.frombuffer(b"MSG ", "<u4")[0]
_HMSG_WORD = np.frombuffer(b"HMSG", "<u4")[0]
_INT64_MAX = np.uint64(2**63 - 1)


class FrameSink(Protocol):
    """Receives the frames of one tapped subscription, in wire order."""

    def on_data(self, bufs: list[bytes], records: np.ndarray) -> None:
        """A run of data frames (reply ``$JS.ACK...``): ``records`` has one row of
        :data:`RECORD_FIELDS` int64 per frame, its offsets into ``b"".join(bufs)``."""

    def on_other(self, subject: bytes, reply: bytes, header: bytes, payload: bytes) -> None:
        """A frame without an ack reply: a status (heartbeat, 404/408/409, flow control...)."""


_ZEROS = np.uint64(0x3030303030303030)  # "00000000"
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIXES = np.uint64(0x0606060606060606)
#: _LEADING[j]: the lowest j bytes of a little-endian word (its first j characters).
_LEADING = np.array([(1 << (8 * j)) - 1 for j in range(9)], np.uint64)
_SCALE = [np.uint64(10 ** (8 * c)) for c in range(3)]


def _words(buf: bytes, size: int = 8) -> np.ndarray:
    """``buf`` as overlapping little-endian unsigned words of ``size`` bytes: element i is bytes
    i..i+size-1 (no copy)."""
    return np.ndarray((max(len(buf) - size + 1, 0),), np.dtype(f"<u{size}"), buffer=buf, strides=(1,))


def _uints(words: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal numbers ``buf[begin:end]`` (``words`` from :func:`_words`) as int64, and which
    are valid (1 to 19 digits, all digits, below 2**63); an invalid one's value is 0.

    Eight digits at a time with SWAR: the 8 bytes ending at a chunk's last digit are one word,
    leading bytes outside the number become "0", and three multiply-shift steps turn the 8 digits
    into their value. No per-digit arrays.
    """
    length = end - begin
    ok = (length >= 1) & (length <= 19)
    value = np.zeros(len(begin), np.uint64)
    chunks = int(-(-length.max() // 8)) if len(length) else 0
    for c in range(min(chunks, 3)):
        first = end - 8 * (c + 1)
        leading = _LEADING[np.minimum(np.maximum(begin - first, 0), 8)]
        word = words[np.maximum(first, 0)]
        word = (word & ~leading) | (_ZEROS & leading)
        ok &= ((word & _HIGH_NIBBLES) == _ZEROS) & (((word + _SIXES) & _HIGH_NIBBLES) == _ZEROS)
        ok &= (first >= 0) | (begin >= first + 8)
        digits = word - _ZEROS
        digits = (digits * np.uint64(10) + (digits >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
        digits = (digits * np.uint64(100) + (digits >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
        digits = (digits * np.uint64(10000) + (digits >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
        value += digits * _SCALE[c]
    ok &= value <= _INT64_MAX
    return np.where(ok, value, 0).astype(np.int64), ok


def scan_data_frames(buf: bytes, sids: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every complete, well-formed MSG/HMSG frame in ``buf`` of one of ``sids`` with an ack reply.

    Vectorised: each position after a LF (and 0) that starts with ``MSG `` or ``HMSG `` is a
    candidate, parsed as if a frame started there. A payload can hold bytes that look like a frame,
    so the caller only trusts a candidate at an offset where the previous frame ended (see
    :class:`_Runs`). Returns the candidates' start and end offsets, their records (columns as in
    :data:`RECORD_FIELDS`) and the index in ``sids`` of each one's sid.
    """
    n = len(buf)
    arr = np.frombuffer(buf, np.uint8)
    words = _words(buf)
    marks = np.flatnonzero((arr == 10) | (arr == 32) | (arr == 46))
    kinds = arr[marks]
    lf, sp, dots = marks[kinds == 10], marks[kinds == 32], marks[kinds == 46]
    starts = lf + 1
    starts = starts[starts + 8 <= n]
    if n >= 8:
        starts = np.concatenate((np.zeros(1, np.int64), starts))
    if not len(starts) or not len(sp) or not len(dots):
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros((0, RECORD_FIELDS), np.int64), empty
    op = _words(buf, 4)[starts]
    headed = (op == _HMSG_WORD) & (arr[starts + 4] == 32)
    keep = headed | (op == _MSG_WORD)
    starts, hm = starts[keep], headed[keep].astype(np.int64)
    subject = starts + 4 + hm
    line = np.searchsorted(lf, subject)
    complete = line < len(lf)
    starts, hm, subject, line = starts[complete], hm[complete], subject[complete], line[complete]
    eol = lf[line] - 1
    first, past = np.searchsorted(sp, subject), np.searchsorted(sp, eol)
    # MSG <subject> <sid> <reply> <size> / HMSG <subject> <sid> <reply> <header size> <size>
    shaped = (past - first == 3 + hm) & (arr[eol] == 13)
    starts, hm, subject, eol, first, past = (a[shaped] for a in (starts, hm, subject, eol, first, past))
    s1, s2, last = sp[first], sp[first + 1], sp[past - 1]
    r_end = np.where(hm == 1, sp[np.maximum(past - 2, 0)], last)
    size, ok = _uints(words, last + 1, eol)
    if hm.any():
        hsize, ok_h = _uints(words, r_end + 1, last)
        hsize = np.where(hm == 1, hsize, 0)
        ok &= ok_h | (hm == 0)
    else:
        hsize = np.zeros_like(size)
    end = eol + 4 + size
    tail = np.minimum(end, n)
    ok &= (s1 > subject) & (r_end - s2 > len(_ACK)) & (hsize <= size) & (end <= n)
    ok &= (arr[tail - 2] == 13) & (arr[tail - 1] == 10)
    ok &= words[np.minimum(s2 + 1, len(words) - 1)] == _ACK_WORD
    # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> (9 tokens), or with
    # <domain>.<account hash> after ACK (11), and a trailing random token (12).
    first_dot = np.searchsorted(dots, s2)
    dot_count = np.searchsorted(dots, r_end) - first_dot
    ok &= (dot_count == 8) | (dot_count == 10) | (dot_count == 11)
    base = first_dot + np.where(dot_count >= 10, 2, 0)
    top = len(dots) - 1

    def dot(j: int) -> np.ndarray:
        return dots[np.minimum(base + j, top)]

    consumer = dot(2) + 1
    sequence, ok_s = _uints(words, dot(4) + 1, dot(5))
    stamp, ok_t = _uints(words, dot(6) + 1, dot(7))
    pending, ok_p = _uints(words, dot(7) + 1, np.where(dot_count == 11, dot(8), r_end))
    ok &= ok_s & ok_t & ok_p
    which = np.full(len(starts), -1, np.int64)
    sid_len = s2 - s1 - 1
    for index, sid in enumerate(sids):
        match = ok & (sid_len == len(sid))
        for k, byte in enumerate(sid):
            match &= arr[np.minimum(s1 + 1 + k, n - 1)] == byte
        which[match] = index
    records = np.stack(
        (subject, s1, s2, r_end, eol, consumer, hsize, size, dot(3) - consumer, sequence, stamp, pending), axis=1
    )
    found = which >= 0
    if found.all():
        return starts, end, records, which
    return starts[found], end[found], records[found], which[found]


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
    :param hold_bytes: full reads held, at most, before they are scanned together. Default 1 MiB.
    :param hold_seconds: how long the first held read waits at most. Default 0.002.
    """

    def __init__(self, nc: Any = None, hold_bytes: int = 1 << 20, hold_seconds: float = 0.002) -> None:
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
            if self._taps and len(data) >= DEFAULT_BUFFER_SIZE and self._held_bytes + len(data) < self._hold_bytes:
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
            elif r_end > s2 and startswith(_ACK, s2 + 1):
                # Every well-formed one was found in bulk.
                raise ValueError(f"unexpected JetStream ack reply subject {buf[s2 + 1 : r_end][:200]!r}")
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


def install(nc: Client, hold_bytes: int = 1 << 20) -> TapParser:
    """Make ``nc`` read through a :class:`TapParser` (once; later calls return the same one).

    Transparent for everything not tapped: it can stay installed for the client's life.
    """
    current = nc._ps
    if isinstance(current, TapParser):
        return current
    parser = TapParser(nc, hold_bytes)
    parser.take_over(current)
    nc._ps = parser
    return parser


def parse_status_header(header: bytes) -> dict[str, str]:
    """``NATS/1.0 408 Request Timeout\\r\\nName: value...`` as nats-py gives it: ``Status``,
    ``Description`` and the header lines (the last value of a repeated name)."""
    lines = header.split(b"\r\n")
    out: dict[str, str] = {}
    first = lines[0][len(b"NATS/1.0") :].strip()
    if first:
        code, _, description = first.partition(b" ")
        if code.isdigit():
            out["Status"] = code.decode()
        if description.strip():
            out["Description"] = description.strip().decode("utf-8", "replace")
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip():
            out[name.strip().decode("ascii", "replace")] = value.strip().decode("utf-8", "replace")
    return out
