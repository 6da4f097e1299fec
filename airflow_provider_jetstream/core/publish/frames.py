"""Publish frames built in bulk: the fast-ingest sender's write path.

nats-py has no bulk publish: its ``publish`` checks the subject, encodes the headers, builds a frame and
wakes its flusher for every message, about 10 us of CPU each, which caps a fast-ingest batch far below
what the server takes. :class:`FrameBuffer` builds the same frames (the layout of nats-py's command
builders, :mod:`nats.protocol.command`, and its header rules) in bulk, and hands a run of them to the
client as one write through its outgoing buffer and flusher (``Client._send_command``, then
``Client._flush_pending`` when its flusher is idle, as its ``publish`` does), so the client's ordering
with its other writes and its buffering during a reconnect still hold.

This is the one place the package writes past nats-py's public API; its tests hold it to frames
nats-py's ``publish`` would send. Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import nats.errors
from nats.aio.client import Client

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
        self._size = 0
        self._payload_bytes = 0

    def __len__(self) -> int:
        return len(self._frames)

    def add(self, subject: str, reply: str, payload: bytes, headers: Mapping[str, str] | None) -> bool:
        """Add one message; True when a run is due (:data:`FLUSH_FRAMES` messages or :data:`FLUSH_BYTES`)."""
        if len(payload) > self.max_payload:
            raise nats.errors.MaxPayloadError
        data = frame(subject, reply, payload, headers or None)
        self._frames.append(data)
        self._size += len(data)
        self._payload_bytes += len(payload)
        return len(self._frames) >= FLUSH_FRAMES or self._size >= FLUSH_BYTES

    async def flush(self) -> None:
        """Hand the frames added so far to the client as one write, and wake its flusher."""
        if not self._frames:
            return
        if self.nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if self.nc.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        data = b"".join(self._frames)
        self.nc.stats["out_msgs"] += len(self._frames)
        self.nc.stats["out_bytes"] += self._payload_bytes
        self._frames.clear()
        self._size = self._payload_bytes = 0
        await self.nc._send_command(data)
        if self.nc._flush_queue is not None and self.nc._flush_queue.empty():
            await self.nc._flush_pending()
