"""The one bridge from synchronous code (operators, sensors' pokes, Spark tasks) to nats-py's asyncio.

Two shapes: :func:`run_sync` runs one coroutine; :func:`iterate_blocking` drives an async iterator one
item at a time on a private event loop, driven only while the caller waits for the next item, so a slow
Spark task leaves unread data in the socket (bounded by the pull buffer) instead of in memory. Inside a
running event loop (a trigger, an async task) blocking would deadlock: both refuse, and the coroutine
is to be awaited instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from airflow_provider_jetstream.core.tasks import stop_task

T = TypeVar("T")


def _refuse_inside_a_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{what} was called from inside a running event loop; await the coroutine instead "
        "(use the hook's async methods in triggers and async tasks)"
    )


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh event loop (``asyncio.run``: Ctrl-C cancels it cleanly, tasks
    left behind are cancelled) and return its result.

    Raises ``RuntimeError`` when called from a thread that already runs an event loop (a trigger,
    an async task): blocking there would deadlock, so ``await`` the coroutine instead.
    """
    try:
        _refuse_inside_a_loop("run_sync()")
    except RuntimeError:
        coro.close()
        raise
    return asyncio.run(coro)


def iterate_blocking(source: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from synchronous code, on a private event loop.

    Closing the iterator early (``limit()``, a task failure) closes ``source`` so it can delete its
    consumer and close its connection. At the end, tasks the work left behind are cancelled, as
    ``asyncio.run`` does.
    """
    _refuse_inside_a_loop("iterate_blocking()")
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                item = loop.run_until_complete(source.__anext__())  # type: ignore[arg-type]
            except StopAsyncIteration:
                break
            yield item
    finally:
        try:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                loop.run_until_complete(aclose())
            _cancel_left_over_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _cancel_left_over_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if tasks:
        loop.run_until_complete(asyncio.gather(*(stop_task(task) for task in tasks)))
