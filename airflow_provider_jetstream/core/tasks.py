"""Awaiting with a bound, and stopping a task, without ever losing a cancellation.

Before Python 3.12, ``asyncio.wait_for`` returns the result instead of raising ``CancelledError`` when
its awaitable finishes in the loop iteration the caller is cancelled in: a loop around it (a puller
waiting for its next message every heartbeat) then goes on for ever, and whoever cancelled it waits
for ever. nats-py awaits its replies and flushes that way too. So the package awaits with a bound
through :func:`wait_task`, and stops a task through :func:`stop_task`, which cancels again a task
that swallowed a cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds :func:`stop_task` lets a cancelled task clean up before it cancels it again.
CLEANUP_GRACE = 5.0


async def wait_task(awaitable: Awaitable[T], timeout: float | None = None) -> T:
    """Await ``awaitable`` in a task of its own, at most ``timeout`` seconds (None: no bound).

    A cancellation of the caller always propagates, even when ``awaitable`` finishes in the same loop
    iteration; and the bound holds even when ``awaitable`` ignores its cancellation (nats-py's drain
    does): then it is left to finish on its own. Raises ``asyncio.TimeoutError`` when the bound is reached.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        _abandon(task)
        raise
    if not done:
        _abandon(task)
        raise asyncio.TimeoutError
    return task.result()


async def stop_task(task: asyncio.Future[Any] | None, grace: float = CLEANUP_GRACE) -> None:
    """Cancel ``task`` and wait until it ended, its outcome retrieved (None: nothing to stop).

    A task still running ``grace`` seconds after a cancellation (one lost by a ``wait_for`` inside it)
    is cancelled again, until it ends: the caller never waits for ever. A cancellation of the caller
    (a trigger cancelled while it stops its puller) is raised once the task ended: what the task's
    clean-up sends (its naks) goes out before the caller goes on to close the connection.
    """
    if task is None:
        return
    caller_cancelled = False
    task.cancel()
    while not task.done():
        try:
            await asyncio.wait({task}, timeout=grace)
        except asyncio.CancelledError:
            caller_cancelled = True
            continue
        if not task.done():
            task.cancel()
    _retrieve(task)
    if caller_cancelled:
        raise asyncio.CancelledError


def _abandon(task: asyncio.Future[Any]) -> None:
    """Cancel a task nobody awaits any more; its outcome is retrieved, so asyncio logs nothing."""
    task.cancel()
    task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event`` to be set: whether it was (no ``TimeoutError``; a
    cancellation goes through)."""
    try:
        await wait_task(event.wait(), max(0.0, timeout))
    except asyncio.TimeoutError:
        return False
    return True


async def next_item(queue: asyncio.Queue[T], timeout: float) -> T:
    """The queue's next item: at once when one is waiting, else within ``timeout`` seconds (else
    ``asyncio.TimeoutError``), through :func:`wait_task`."""
    if queue.qsize():
        return queue.get_nowait()
    return await wait_task(queue.get(), timeout)
