"""Helpers for the sensor and trigger tests: unique names, nats-py set-up, trigger round trips."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import nats
from airflow.triggers.base import BaseTrigger, TriggerEvent
from nats.aio.client import Client


def unique(area: str) -> str:
    """A stream / consumer / bucket name of this area, unique per test: ``sens_<area>_<hex>``."""
    return f"sens_{area}_{uuid.uuid4().hex[:8]}"


async def connect(url: str, name: str = "sens-test") -> Client:
    return await nats.connect(url, name=name, allow_reconnect=False, connect_timeout=5)


def rebuild(trigger: BaseTrigger) -> BaseTrigger:
    """Serialize a trigger, check its kwargs are plain JSON, and rebuild it from classpath + kwargs."""
    classpath, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs, f"kwargs are not plain JSON: {kwargs!r}"
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


async def first_event(trigger: BaseTrigger, timeout: float) -> TriggerEvent:
    """Round trip a trigger (serialize -> rebuild -> run) and return its first event, then clean up."""
    rebuilt = rebuild(trigger)
    events = rebuilt.run()
    try:
        return await asyncio.wait_for(anext(events), timeout)
    finally:
        await events.aclose()
        await rebuilt.cleanup()


def clients_named(server: Any, client_name: str) -> list[dict[str, Any]]:
    """The server's ``connz`` entries of the client connections with this name."""
    connz = server.monitor("connz?limit=10000")
    return [c for c in connz.get("connections", []) if c.get("name") == client_name]


def connection_count(server: Any, client_name: str) -> int:
    """How many client connections with this name the server has."""
    return len(clients_named(server, client_name))


def messages_sent(server: Any, client_name: str) -> int:
    """How many messages the clients with this name have sent the server (its ``connz`` ``in_msgs``):
    one per JetStream request, so a count of checks made over that connection alone."""
    return sum(c.get("in_msgs", 0) for c in clients_named(server, client_name))


async def eventually(probe: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    """Poll ``probe()`` (sync or async) until ``done(value)``; the last value either way.

    For a state the servers reach asynchronously (a connection opened or closed, a watch
    created): waiting a fixed time instead makes the test fail on a busy machine.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if done(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


class Later(threading.Thread):
    """Run ``make_coro()`` in its own event loop after ``delay`` seconds (while dag.test() blocks)."""

    def __init__(self, delay: float, make_coro: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        super().__init__(daemon=True)
        self.delay, self.make_coro = delay, make_coro
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        import time

        time.sleep(self.delay)
        try:
            self.result = asyncio.run(self.make_coro())
        except BaseException as err:  # re-raised in the test by finish()
            self.error = err

    def finish(self, timeout: float = 30) -> Any:
        self.join(timeout)
        if self.error:
            raise self.error
        return self.result


async def hub_mirror_bucket(topology: Any, copy: str, origin: str, legacy: bool) -> None:
    """A hub bucket mirroring the leaf's ``origin``: as nats.go / nats.js create it (the origin's
    subjects kept) or, ``legacy``, as this provider's earlier releases did (a transform to ``$KV.<copy>.>``)."""
    mirror: dict = {"name": f"KV_{origin}", "external": {"api": "$JS.leaf.API"}}
    if legacy:
        mirror["subject_transforms"] = [{"src": f"$KV.{origin}.>", "dest": f"$KV.{copy}.>"}]
    config = {
        "name": f"KV_{copy}",
        "max_msgs_per_subject": 5,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
        "mirror_direct": True,
        "discard": "new",
        "mirror": mirror,
    }
    nc = await connect(topology.url("hub"))
    try:
        reply = json.loads((await nc.request(f"$JS.hub.API.STREAM.CREATE.KV_{copy}", json.dumps(config).encode())).data)
        assert "error" not in reply, reply
    finally:
        await nc.close()
