"""Fixtures for the management operators: raw JetStream access to check what the operators did."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import nats
import pytest

from airflow_provider_jetstream.local.servers import USERS, LocalTopology


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

    def info(self, domain: str, stream: str) -> dict | None:
        reply = self.api(domain, f"STREAM.INFO.{stream}")
        return None if "error" in reply else reply

    def level(self, domain: str) -> int:
        return int((self.api(domain, "INFO").get("api") or {}).get("level") or 0)

    def api_total(self, domain: str) -> int:
        """The domain's count of JetStream API requests for this account (this INFO included)."""
        return int(self.api(domain, "INFO")["api"]["total"])

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

    def wait_for(self, domain: str, stream: str, messages: int, timeout: float = 20.0) -> dict:
        """Stream info once it holds ``messages`` messages (mirrors and sources copy asynchronously)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            info = self.info(domain, stream)
            if info and info["state"]["messages"] >= messages:
                return info
            if time.monotonic() > deadline:
                raise AssertionError(f"{stream} in {domain} has {info and info['state']} after {timeout}s")
            time.sleep(0.2)


@pytest.fixture
def raw(hub_leaf: LocalTopology) -> Raw:
    return Raw(hub_leaf)
