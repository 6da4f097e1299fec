"""Raw JetStream access around the code under test: direct API requests, a per-client API watch, a quiet server."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology, NatsServer
from tests.support.waiting import wait_until


def uid(prefix: str = "mgmt") -> str:
    """A name no other test uses on the shared topology (area prefix + random part)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Raw:
    """Direct JetStream requests to a topology, bypassing the code under test."""

    def __init__(self, topology: LocalTopology) -> None:
        self.topology = topology

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    async def _request(self, subject: str, body: Any = None, account: str = "ACC", server: str | None = None) -> Any:
        user, password = USERS[account]
        url = self.topology.hub.url if server in (None, "hub") else self.topology.leaves[server].url
        nc = await nats.connect(url, user=user, password=password, allow_reconnect=False)
        try:
            payload = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            msg = await nc.request(subject, payload, timeout=5)
            return json.loads(msg.data) if msg.data else {}
        finally:
            await nc.close()

    def request(self, subject: str, body: Any = None, account: str = "ACC", server: str | None = None) -> Any:
        return self.run(self._request(subject, body, account, server))

    def api(self, domain: str, suffix: str, body: Any = None, account: str = "ACC") -> Any:
        return self.request(f"$JS.{domain}.API.{suffix}", body, account)

    def info(self, domain: str, stream: str, account: str = "ACC") -> dict | None:
        reply = self.api(domain, f"STREAM.INFO.{stream}", account=account)
        return None if "error" in reply else reply

    def level(self, domain: str) -> int:
        return int((self.api(domain, "INFO").get("api") or {}).get("level") or 0)

    def create(self, domain: str, config: dict) -> dict:
        reply = self.api(domain, f"STREAM.CREATE.{config['name']}", config)
        assert "error" not in reply, reply
        return reply

    def publish(self, subject: str, payloads: list[bytes], server: str | None = None) -> list[dict]:
        async def go() -> list[dict]:
            user, password = USERS["ACC"]
            url = self.topology.hub.url if server in (None, "hub") else self.topology.leaves[server].url
            nc = await nats.connect(url, user=user, password=password)
            try:
                return [json.loads((await nc.request(subject, p, timeout=5)).data) for p in payloads]
            finally:
                await nc.close()

        return self.run(go())

    def wait_for(self, domain: str, stream: str, messages: int, timeout: float = 60.0, account: str = "ACC") -> dict:
        """Stream info once it holds ``messages`` messages (mirrors and sources copy asynchronously)."""

        def holds(info: dict | None) -> bool:
            return bool(info) and info["state"]["messages"] >= messages

        return wait_until(lambda: self.info(domain, stream, account), holds, timeout, f"{stream} in {domain}")


class ApiWatch:
    """Every JetStream API request published in one account on one server, seen by a separate
    monitoring connection subscribed to ``$JS.>``: ``(subject, reply)`` pairs, in order.

    Server-wide counters (the account's API total) also count the requests of the hub's mirror and
    source consumers and of anything else running; this counts the requests of one client only:
    :meth:`requests_of` groups them by the reply inbox of the connection that sent them.
    """

    def __init__(self, url: str, account: str = "ACC") -> None:
        self.url = url
        self.account = account
        self.seen: list[tuple[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._nc: Any = None

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def __enter__(self) -> ApiWatch:
        self._thread.start()

        async def start() -> None:
            user, password = USERS[self.account]
            self._nc = await nats.connect(self.url, user=user, password=password, allow_reconnect=False)

            async def record(msg: Any) -> None:
                self.seen.append((msg.subject, msg.reply or ""))

            await self._nc.subscribe("$JS.>", cb=record)
            await self._nc.flush()

        self._call(start())
        return self

    def flush(self) -> list[tuple[str, str]]:
        """Everything published before this call has been recorded (the server delivers in order)."""
        self._call(self._nc.flush())
        return list(self.seen)

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self._nc.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def requests_of(self, marker: Callable[[str], bool]) -> list[str]:
        """The API subjects requested by the connection(s) that sent a request ``marker`` matches
        (one client connection has one reply inbox prefix: ``_INBOX.<id>.``)."""
        seen = self.flush()
        inboxes = {reply.rsplit(".", 1)[0] for subject, reply in seen if reply and marker(subject)}
        return [subject for subject, reply in seen if reply and reply.rsplit(".", 1)[0] in inboxes]


class QuietServer:
    """A JetStream server (domain ``quiet``) that nothing else uses: its traffic counters count
    only what a test does. ``traffic()`` is ``(connections ever accepted, messages received)``."""

    def __init__(self, workdir: Path) -> None:
        user, password = USERS["ACC"]
        self.server = NatsServer(
            name="quiet-server",
            workdir=workdir,
            body=f"jetstream {{ store_dir: {json.dumps(str(workdir / 'store'))}, domain: quiet }}\n"
            f"authorization {{ user: {user}, password: {password} }}\n",
        )

    def traffic(self) -> tuple[int, int]:
        varz = self.server.monitor("varz") or {}
        return int(varz.get("total_connections", 0)), int(varz.get("in_msgs", 0))
