"""The ``jetstream`` connection in Airflow's UI: the list's Test button and the Edit form's extra fields.

Airflow 3.3's UI has two gaps for a connection type whose servers live in the Servers field:

- the connection list's Test button posts ``port: Number(port)``, which is ``0`` for a connection stored
  without a port, and the API refuses it ("The host or port to test differs from the stored
  connection") because ``0`` differs from the stored ``NULL``; port 0 is no endpoint anyone can test,
  so for a ``jetstream`` connection it is taken as "no port" and the stored connection is tested;
- the Edit form shows only the extra fields whose keys the stored extra JSON holds, so a connection
  saved with only ``domain`` shows no TLS or credential fields to fill in; the connection API's answers
  to the UI list every field of the ``jetstream`` form, unset ones as ``null`` (which the connection
  reads as not given), so the form shows them all.

Both are one ASGI middleware on the api-server (an Airflow plugin the provider registers); other
connection types and every other request pass through unchanged, and no value is added or unmasked.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS

CONN_TYPE = "jetstream"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_TEST = re.compile(r"/api/v2/connections/test$")
_READ = re.compile(r"/api/v2/connections(/[^/]+)?$")
#: Larger bodies are passed through untouched (a connection list page is far smaller).
_MAX_BODY = 4 * 1024 * 1024


def without_list_port_zero(body: dict[str, Any]) -> dict[str, Any]:
    """The Test request with the list's ``port: 0`` ("no port") left out, for a ``jetstream`` connection."""
    if body.get("conn_type") == CONN_TYPE and body.get("port") == 0:
        return {key: value for key, value in body.items() if key != "port"}
    return body


def with_every_extra_field(connection: dict[str, Any]) -> dict[str, Any]:
    """A ``jetstream`` connection as the API gives it, its extra JSON listing every form field (unset: null)."""
    if connection.get("conn_type") != CONN_TYPE:
        return connection
    try:
        extra = json.loads(connection.get("extra") or "{}")
    except ValueError:
        return connection  # the form shows the stored text as it is
    if not isinstance(extra, dict):
        return connection
    full = {**{name: None for name in EXTRA_FIELDS}, **extra}
    return {**connection, "extra": json.dumps(full)}


def connections_response(body: dict[str, Any]) -> dict[str, Any]:
    """One connection or a page of them, each ``jetstream`` one with every extra field."""
    if isinstance(body.get("connections"), list):
        return {**body, "connections": [with_every_extra_field(c) for c in body["connections"]]}
    return with_every_extra_field(body)


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    chunks, messages = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return b"".join(chunks), messages
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), messages


class ConnectionFormMiddleware:
    """ASGI middleware: the Test request and the connection reads of the ``jetstream`` type, as described above."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif scope["method"] == "POST" and _TEST.search(scope["path"]):
            await self._test(scope, receive, send)
        elif scope["method"] == "GET" and _READ.search(scope["path"]):
            await self._read(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _test(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw, messages = await _read_body(receive)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict) and (changed := without_list_port_zero(body)) is not body:
            raw = json.dumps(changed).encode()
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
            scope = {**scope, "headers": [*headers, (b"content-length", str(len(raw)).encode())]}
            messages = [{"type": "http.request", "body": raw, "more_body": False}]
        pending = list(messages)

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Receive, send: Send) -> None:
        start: Message | None = None
        chunks: list[bytes] = []
        size = 0

        async def capture(message: Message) -> None:
            nonlocal start, size
            if message["type"] == "http.response.start":
                headers = dict((k.lower(), v) for k, v in message.get("headers", []))
                json_body = headers.get(b"content-type", b"").startswith(b"application/json")
                plain = b"content-encoding" not in headers
                if message["status"] == 200 and json_body and plain:
                    start = message
                    return
                await send(message)
            elif start is None:
                await send(message)
            else:
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > _MAX_BODY or not message.get("more_body", False):
                    await self._send_rewritten(start, b"".join(chunks), message.get("more_body", False), send)
                    start = None

        await self.app(scope, receive, capture)

    @staticmethod
    async def _send_rewritten(start: Message, raw: bytes, more: bool, send: Send) -> None:
        if not more:
            with contextlib.suppress(ValueError, AttributeError, TypeError):  # another shape: sent as it came
                raw = json.dumps(connections_response(json.loads(raw))).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        if not more:
            headers.append((b"content-length", str(len(raw)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": raw, "more_body": more})
