"""Publish frames built in bulk: the fast-ingest sender's write path.

nats-py has no bulk publish: its ``publish`` checks the subject, encodes the headers, builds a frame and
wakes its flusher for every message, about 10 us of CPU each, which caps a fast-ingest batch far below
what the server takes. :class:`FrameBuffer` builds the same frames (the layout of nats-py's command
builders, :mod:`nats.protocol.command`, and its header rules) in bulk, and hands a run of them to the
client as one write through its outgoing buffer and flusher (``Client._send_command``, then
``Client._flush_pending`` when its flusher is idle, as its ``publish`` does), so the client's ordering
with its other writes and its buffering during a reconnect still hold.

:meth:`FrameBuffer.add_block` frames a run of a :class:`~airflow_provider_jetstream.core.publish.blocks.Block`
(many messages to one subject, their reply subjects numbered) in one pass: the parts every frame shares are
built once, the ones that differ (reply number, sizes, ``Nats-Msg-Id``, payload) by the interpreter's
C loops (``map``, slice assignment, ``bytes.join``), not one Python step per message.

This is the one place the package writes past nats-py's public API; its tests hold it to frames
nats-py's ``publish`` would send. Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Mapping, Sequence

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.blocks import Block

#: The first line of a header block.
HEADER_LINE = "NATS/1.0\r\n"
#: What nats-py accepts as a header name (an HTTP token); a value's line breaks become spaces, as there.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})
#: A run of frames is handed to the client once it holds this many messages or bytes.
FLUSH_FRAMES = 128
FLUSH_BYTES = 256 * 1024


@functools.lru_cache(maxsize=1024)
def _header_name(name: str) -> str:
    """``name`` as sent (stripped; empty: not sent); :class:`nats.errors.BadHeaderError` when not a token."""
    key = name.strip()
    if key and not _HEADER_NAME.fullmatch(key):
        raise nats.errors.BadHeaderError(key)
    return key


def header_block(headers: Mapping[str, str]) -> str:
    """The header block nats-py's ``publish`` sends for ``headers``: names stripped (empty ones
    skipped), values stripped with line breaks as spaces; a name that is not a token is refused
    (:class:`nats.errors.BadHeaderError`, as nats-py does)."""
    lines = [HEADER_LINE]
    for name, value in headers.items():
        key = _header_name(name)
        if key:
            value = value.strip()
            if "\r" in value or "\n" in value:
                value = value.translate(_LINE_BREAKS)
            lines.append(f"{key}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines)


def _id_values(ids: Sequence[str]) -> list[bytes]:
    """Message ids as :func:`header_block` sends values (stripped, line breaks as spaces), encoded; line breaks
    looked for once in them all."""
    stripped = list(map(str.strip, ids))
    joined = "".join(stripped)
    if "\r" in joined or "\n" in joined:
        stripped = [value.translate(_LINE_BREAKS) for value in stripped]
    return list(map(str.encode, stripped))


def _shared_parts(block: Block) -> tuple[bytes, bytes] | None:
    """The header block every message of ``block`` shares, split where its ``Nats-Msg-Id`` value goes
    (``(before, after)``; ``after`` empty without ids); None without headers."""
    headers = dict(block.headers or {})
    if block.msg_ids is not None:
        headers[MSG_ID_HEADER] = "\0"
    elif not headers:
        return None
    text = header_block(headers)
    if block.msg_ids is None:
        return text.encode(), b""
    # Only the id's line holds "\0" (header_block keeps values' other characters; an id line is never empty).
    before, _, after = text.partition(f"{MSG_ID_HEADER}: \0\r\n")
    return f"{before}{MSG_ID_HEADER}: ".encode(), f"\r\n{after}".encode()


def frame(subject: str, reply: str, payload: bytes, headers: Mapping[str, str] | None) -> bytes:
    """One message as the bytes nats-py's ``publish(subject, payload, reply, headers)`` writes."""
    if headers is None:
        return f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"
    block = header_block(headers).encode()
    size = len(block)
    return b"%s %s %s %d %d\r\n%s%s\r\n" % (
        b"HPUB",
        subject.encode(),
        reply.encode(),
        size,
        size + len(payload),
        block,
        payload,
    )


class FrameBuffer:
    """Frames of messages to publish, handed to ``nc`` a run at a time.

    :meth:`add` refuses what nats-py's ``publish`` refuses of a message (a payload over the server's
    ``max_payload``, a header name that is not a token) and says when a run is due; :meth:`flush` writes
    the run, refused on a closed or draining client as ``publish`` is. Nothing is sent before :meth:`flush`.
    """

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.max_payload = nc.max_payload
        self._frames: list[bytes] = []
        self._count = 0
        self._size = 0
        self._payload_bytes = 0

    def __len__(self) -> int:
        return self._count

    def add(self, subject: str, reply: str, payload: bytes, headers: Mapping[str, str] | None) -> bool:
        """Add one message; True when a run is due (:data:`FLUSH_FRAMES` messages or :data:`FLUSH_BYTES`)."""
        if len(payload) > self.max_payload:
            raise nats.errors.MaxPayloadError
        data = frame(subject, reply, payload, headers or None)
        self._frames.append(data)
        self._count += 1
        self._size += len(data)
        self._payload_bytes += len(payload)
        return self._count >= FLUSH_FRAMES or self._size >= FLUSH_BYTES

    def add_block(self, block: Block, start: int, stop: int, reply: str, first: int, after: str) -> bool:
        """Add messages ``start`` to ``stop`` of ``block``, message ``start + k`` with the reply subject
        ``f"{reply}{first + k}{after}"``; True when a run is due. What :meth:`add` refuses is refused the
        same: the messages before a payload over ``max_payload`` are added, then it raises."""
        payloads = block.payloads[start:stop]
        sizes = list(map(len, payloads))
        too_big = max(sizes, default=0) > self.max_payload
        if too_big:
            cut = next(k for k, size in enumerate(sizes) if size > self.max_payload)
            payloads, sizes = payloads[:cut], sizes[:cut]
        count = len(payloads)
        if block.each is not None:
            for k, (payload, headers) in enumerate(zip(payloads, block.each[start : start + count], strict=True)):
                self.add(block.subject, f"{reply}{first + k}{after}", payload, headers)
        elif count:
            self._frames.append(self._frame_run(block, start, payloads, sizes, reply, first, after))
            self._count += count
            self._size += len(self._frames[-1])
            self._payload_bytes += sum(sizes)
        if too_big:
            raise nats.errors.MaxPayloadError
        return self._count >= FLUSH_FRAMES or self._size >= FLUSH_BYTES

    @staticmethod
    def _frame_run(
        block: Block, start: int, payloads: Sequence[bytes], sizes: list[int], reply: str, first: int, after: str
    ) -> bytes:
        """The frames of ``payloads`` (messages ``start``... of ``block``) as one ``bytes``: what :func:`frame`
        gives for each, joined."""
        count = len(payloads)
        numbers = range(first, first + count)
        # A template of the line before each payload; the shared parts' "%" as literals.
        line = f"{block.subject} {reply}".replace("%", "%%").encode() + b"%d" + after.replace("%", "%%").encode()
        shared = _shared_parts(block)
        if shared is None:
            # PUB <subject> <reply><n><after> <size>\r\n<payload>\r\n
            parts: list[bytes] = [b"\r\n"] * (3 * count)
            parts[0::3] = map((b"PUB " + line + b" %d\r\n").__mod__, zip(numbers, sizes, strict=True))
            parts[1::3] = payloads
            return b"".join(parts)
        before, behind = shared
        template = b"HPUB " + line + b" %d %d\r\n" + before.replace(b"%", b"%%")
        if block.msg_ids is None:
            # HPUB <subject> <reply><n><after> <header size> <total size>\r\n<header block><payload>\r\n
            head = len(before)
            parts = [b"\r\n"] * (3 * count)
            parts[0::3] = map(template.__mod__, zip(numbers, [head] * count, map(head.__add__, sizes), strict=True))
            parts[1::3] = payloads
            return b"".join(parts)
        # HPUB ... \r\n<header block up to the id><id><rest of the header block><payload>\r\n
        ids = _id_values(block.msg_ids[start : start + count])
        heads = list(map((len(before) + len(behind)).__add__, map(len, ids)))
        parts = [behind] * (5 * count)
        parts[0::5] = map(template.__mod__, zip(numbers, heads, map(operator.add, heads, sizes), strict=True))
        parts[1::5] = ids
        parts[3::5] = payloads
        parts[4::5] = [b"\r\n"] * count
        return b"".join(parts)

    async def flush(self) -> None:
        """Hand the frames added so far to the client as one write, and wake its flusher."""
        if not self._frames:
            return
        if self.nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if self.nc.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        data = b"".join(self._frames)
        self.nc.stats["out_msgs"] += self._count
        self.nc.stats["out_bytes"] += self._payload_bytes
        self._frames.clear()
        self._count = self._size = self._payload_bytes = 0
        await self.nc._send_command(data)
        if self.nc._flush_queue is not None and self.nc._flush_queue.empty():
            await self.nc._flush_pending()
