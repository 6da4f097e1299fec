"""Waiting on a condition with a deadline: a fixed sleep is a guess, too short on a busy machine, too long elsewhere."""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

#: Seconds between two looks at a condition.
POLL = 0.05
#: Every deadline of the suite's waits is multiplied by this: ``JETSTREAM_TEST_TIME_SCALE=3 make test`` on a
#: machine three times slower (or busier) than usual. The per-test timeout (pytest-timeout) scales with it.
TIME_SCALE = float(os.environ.get("JETSTREAM_TEST_TIME_SCALE") or 1)


def scaled(seconds: float) -> float:
    """``seconds`` times :data:`TIME_SCALE`: a deadline on this machine."""
    return seconds * TIME_SCALE


async def eventually(probe: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    """Poll ``probe()`` (sync or async) until ``done(value)``; the last value either way.

    For a state the servers reach asynchronously (a connection opened or closed, a watch
    created): waiting a fixed time instead makes the test fail on a busy machine.
    """
    deadline = time.monotonic() + scaled(timeout)
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if done(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(POLL)


def wait_until(probe: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 60.0, what: str = "") -> Any:
    """:func:`eventually` for code without an event loop: ``probe()``'s value once ``done(value)``; fails
    (an ``AssertionError`` naming ``what`` and the last value) when that does not hold within ``timeout``."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what or 'not reached'} after {timeout}s: {value!r}"
        time.sleep(POLL)


class Later(threading.Thread):
    """Run ``make_coro()`` in an event loop of its own thread while ``dag.test()`` blocks the test's; the coroutine
    waits for what it needs (a log line, a server state) before it acts. ``finish()`` re-raises its error."""

    def __init__(self, make_coro: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        super().__init__(daemon=True)
        self.make_coro = make_coro
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = asyncio.run(self.make_coro())
        except BaseException as err:  # re-raised in the test by finish()
            self.error = err

    def finish(self, timeout: float = 60) -> Any:
        timeout = scaled(timeout)
        self.join(timeout)
        assert not self.is_alive(), f"the background work did not end within {timeout}s"
        if self.error:
            raise self.error
        return self.result
