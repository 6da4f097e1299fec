"""Frames of chosen subscriptions, handed over as bytes before nats-py builds a message object of them.

Why. nats-py's parser hands every ``MSG``/``HMSG`` frame to ``Client._process_msg(sid, subject, reply,
payload, headers)``, which parses the header block into a dict (keeping the last value of a repeated
name), builds a ``Msg`` and queues it for the subscription's task: about 15 us of Python per message, and
the repeated header values lost. A consumer reading thousands of messages a second needs neither: it
needs the reply subject (the ack metadata), the raw header block (every value) and the payload.

:func:`subscribe_frames` makes a normal nats-py subscription (so a reconnect subscribes it again, and
unsubscribing, draining and closing work as ever) whose frames go to a handler of the caller's instead:
``handler(subject, reply, headers, payload)``, all ``bytes`` (``headers`` empty when the frame has none),
called in the client's read loop, in wire order, before nats-py sees the frame. The handler must not
block: it records and returns. Every other subscription's frames go to nats-py untouched. The hook is the
client's ``_process_msg`` attribute (stable since nats-py 2.0), wrapped once per client.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription

#: ``handler(subject, reply, headers, payload)``: one frame of a routed subscription, all ``bytes``.
FrameHandler = Callable[[bytes, bytes, bytes, bytes], None]


class _Routes:
    """The routed subscriptions of one client, and its wrapped ``_process_msg``."""

    def __init__(self, nc: Client) -> None:
        self.handlers: dict[int, FrameHandler] = {}
        self._to_nats_py = nc._process_msg

    async def process(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        handler = self.handlers.get(sid)
        if handler is None:
            await self._to_nats_py(sid, subject, reply, data, headers)
            return
        handler(subject, reply, headers or b"", data)


def _routes(nc: Client) -> _Routes:
    routes = getattr(nc, "_jetstream_frame_routes", None)
    if routes is None:
        routes = _Routes(nc)
        nc._process_msg = routes.process  # type: ignore[method-assign]
        nc._jetstream_frame_routes = routes  # type: ignore[attr-defined]
    return routes


async def subscribe_frames(nc: Client, subject: str, handler: FrameHandler) -> Subscription:
    """Subscribe ``subject`` and hand its frames to ``handler`` as bytes (see the module doc); returns the
    nats-py subscription (unsubscribe it to stop: later frames are dropped)."""
    routes = _routes(nc)
    sub = await nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
    routes.handlers[sub._id] = handler
    return sub


async def unsubscribe_frames(sub: Subscription) -> None:
    """Stop handing ``sub``'s frames over and unsubscribe it (best effort on a closed connection)."""
    routes: Any = getattr(sub._conn, "_jetstream_frame_routes", None)
    if routes is not None:
        routes.handlers.pop(sub._id, None)
    if not sub._conn.is_closed:
        with contextlib.suppress(nats.errors.Error):  # closed, draining or gone meanwhile: nothing left to stop
            await sub.unsubscribe()
