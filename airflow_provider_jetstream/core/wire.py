"""NATS wire framing in bulk: the pull inbox's MSG/HMSG frames taken from nats-py's read loop.

Why this hook. nats-py 2.16 reads the socket in ``Client._read_loop``
(``b = await self._transport.read(DEFAULT_BUFFER_SIZE); await self._ps.parse(b)``) and its
``Parser.parse`` builds a ``Msg``, runs ``_process_msg`` and queues it, once per message: ~80 % of
the fast path's CPU. Everything else nats-py does (connect, every auth method, TLS and mutual TLS,
server discovery, reconnects, PING/PONG, ``-ERR``, request/reply) happens either before the read
loop starts or through that same ``parse`` call. So :class:`TapParser` replaces the client's
``_ps`` with a ``Parser`` subclass: it splits the buffer into frames with a tight loop (one
``find`` per control line, no object per message), keeps the MSG/HMSG frames of *tapped*
subscription ids as integer offsets into the received buffers, and hands every other frame,
byte for byte, to nats-py's own ``Parser.parse`` in order. The subscription itself is a normal
nats-py subscription (so reconnects re-subscribe it); only its frames never reach nats-py. The
hooks used are the ``_ps`` attribute and the ``Parser`` class (stable since nats-py 2.0), and
``Parser.reset`` (called by nats-py on reconnect) clears the partial frame here too.

Offsets become Arrow columns in :mod:`airflow_provider_jetstream.core.wire_columns`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from nats.aio.client import Client
from nats.protocol.parser import AWAITING_MSG_PAYLOAD, Parser

#: Fields recorded per data frame, offsets relative to its buffer: subject start, subject end
#: (space), sid end (space), reply end, control line end (CR), header size, total size.
RECORD_FIELDS = 7
_ACK = b"$JS.ACK."


class FrameSink(Protocol):
    """Receives the frames of one tapped subscription, in wire order."""

    def on_data(self, bufs: list[tuple[bytes, int]], records: list[int]) -> None:
        """A run of data frames (reply ``$JS.ACK...``): ``records`` holds :data:`RECORD_FIELDS`
        integers per frame; ``bufs`` the buffers they point into, each with the index of its first
        frame."""

    def on_other(self, subject: bytes, reply: bytes, header: bytes, payload: bytes) -> None:
        """A frame without an ack reply: a status (heartbeat, 404/408/409, flow control...)."""


class _Tap:
    __slots__ = ("bufs", "current", "records", "sink")

    def __init__(self, sink: FrameSink) -> None:
        self.sink = sink
        self.bufs: list[tuple[bytes, int]] = []
        self.records: list[int] = []
        self.current: bytes | None = None

    def flush(self) -> None:
        if self.records:
            bufs, records = self.bufs, self.records
            self.bufs, self.records, self.current = [], [], None
            self.sink.on_data(bufs, records)
        else:
            self.bufs, self.current = [], None


class TapParser(Parser):
    """nats-py's parser, except that frames of tapped subscription ids go to a :class:`FrameSink`.

    :param nc: the client whose parser this replaces (see :func:`install`).
    :param flush_records: data frames gathered before they are handed over. Default 8192.
    :param idle: seconds without new data after which fewer frames are handed over (the end of a
        burst: the reader must see them to ask for more). Default 0.002. Handing over runs of
        thousands of frames, not whatever one socket read held, keeps Arrow's per-call cost small.
    """

    def __init__(self, nc: Any = None, flush_records: int = 8192, idle: float = 0.002) -> None:
        self._taps: dict[bytes, _Tap] = {}
        self._rest = b""
        self._raw_left = 0
        self._flush_fields = flush_records * RECORD_FIELDS
        self._idle = idle
        self._last_data = 0.0
        self._timer: asyncio.TimerHandle | None = None
        super().__init__(nc)

    def reset(self) -> None:
        """nats-py calls this on (re)connect: a partial frame of the old socket is dropped."""
        super().reset()
        self._rest = b""
        self._raw_left = 0
        for tap in getattr(self, "_taps", {}).values():
            tap.flush()

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
        """Stop tapping ``sid``: frames gathered and not yet handed over are dropped, later ones go
        to nats-py (which drops them once unsubscribed)."""
        self._taps.pop(str(sid).encode(), None)

    def flush(self) -> None:
        """Hand every gathered data frame to its sink now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for tap in list(self._taps.values()):
            tap.flush()

    def _on_idle(self) -> None:
        loop = asyncio.get_running_loop()
        wait = self._last_data + self._idle - loop.time()
        if wait > 0:
            self._timer = loop.call_later(wait, self._on_idle)
        else:
            self._timer = None
            self.flush()

    async def parse(self, data: bytes = b"") -> None:
        if self._raw_left:
            head, data = data[: self._raw_left], data[self._raw_left :]
            self._raw_left -= len(head)
            await super().parse(head)
            if not data:
                return
        buf = self._rest + data if self._rest else bytes(data)
        passthrough, pos = split_frames(buf, self._taps)
        self._rest = buf[pos:]
        if passthrough:
            await super().parse(b"".join(passthrough))
        pending = [t for t in self._taps.values() if t.records]
        if not pending:
            return
        if any(len(t.records) >= self._flush_fields for t in pending):
            self.flush()
            return
        loop = asyncio.get_running_loop()
        self._last_data = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(self._idle, self._on_idle)


def split_frames(buf: bytes, taps: dict[bytes, _Tap]) -> tuple[list[bytes], int]:
    """Split ``buf`` into frames; record tapped data frames, collect the others (whole frames).

    Returns the frames for nats-py and the offset of the first incomplete frame.
    """
    passthrough: list[bytes] = []
    n = len(buf)
    pos = 0
    find, rfind, startswith = buf.find, buf.rfind, buf.startswith
    last_tap: _Tap | None = None
    last_sid = b""
    records: list[int] = []
    # The hot path: a MSG of the tap seen last, with an ack reply: " <sid> $JS.ACK." after the subject.
    fast_key, fast_len = b"\0", 0
    while pos < n:
        eol = find(b"\r\n", pos)
        if eol < 0:
            break
        op = buf[pos]
        if op == 77:
            s1 = find(b" ", pos + 4, eol)
            if startswith(fast_key, s1):
                s2 = s1 + fast_len
                sp = rfind(b" ", s2, eol)
                size = int(buf[sp + 1 : eol])
                end = eol + 4 + size
                if end > n:
                    break
                records.extend((pos + 4, s1, s2, sp, eol, 0, size))
                pos = end
                continue
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
            sid = buf[s1 + 1 : s2]
            if sid == last_sid:
                tap = last_tap
            else:
                tap = taps.get(sid)
                last_sid, last_tap = sid, tap
                if tap is not None:
                    if tap.current is not buf:
                        tap.current = buf
                        tap.bufs.append((buf, len(tap.records) // RECORD_FIELDS))
                    records = tap.records
                    fast_key, fast_len = b" " + sid + b" " + _ACK, len(sid) + 1
                else:
                    fast_key = b"\0"
            if tap is None:
                passthrough.append(buf[pos:end])
            elif r_end > s2 and startswith(_ACK, s2 + 1):
                records.extend((start, s1, s2, r_end, eol, hsize, size))
            else:
                tap.flush()
                tap.sink.on_other(
                    buf[start:s1], buf[s2 + 1 : r_end] if r_end > s2 else b"",
                    buf[eol + 2 : eol + 2 + hsize], buf[eol + 2 + hsize : end - 2],
                )  # fmt: skip
                last_sid, last_tap, fast_key = b"", None, b"\0"
            pos = end
        else:
            passthrough.append(buf[pos : eol + 2])
            pos = eol + 2
    return passthrough, pos


def install(nc: Client, flush_records: int = 8192) -> TapParser:
    """Make ``nc`` read through a :class:`TapParser` (once; later calls return the same one).

    Transparent for everything not tapped: it can stay installed for the client's life.
    """
    current = nc._ps
    if isinstance(current, TapParser):
        return current
    parser = TapParser(nc, flush_records)
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
