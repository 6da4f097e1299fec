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


def connection_count(server: Any, client_name: str) -> int:
    """How many client connections with this name the server has (from its ``connz``)."""
    connz = server.monitor("connz?limit=10000")
    return sum(1 for c in connz.get("connections", []) if c.get("name") == client_name)


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
