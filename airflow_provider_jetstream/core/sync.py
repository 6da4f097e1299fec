"""The one bridge from synchronous code (operators, sensors' pokes, Spark tasks) to nats-py's asyncio.

Three shapes: :func:`run_sync` runs one coroutine; :func:`iterate_blocking` drives an async iterator one
item at a time on a private event loop, driven only while the caller waits for the next item, so a slow
Spark task leaves unread data in the socket (bounded by the pull buffer) instead of in memory;
:func:`hold` keeps an async context (a connection) open on a private event loop for a block of code.

While an iteration or a hold is open, the thread's :func:`run_sync` calls run on its loop, so they share
what is open there (the hook's one connection per loop): the ``ack()`` of a message consumed by a blocking
iteration settles on the iteration's connection instead of opening one for the one message. Inside a
running event loop (a trigger, an async task) blocking would deadlock: all three refuse, and the coroutine
is to be awaited instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from airflow_provider_jetstream.core.tasks import stop_task

T = TypeVar("T")

#: Per thread: ``loops``, the private loops of the open iterations and holds, the innermost last.
_THREAD = threading.local()


def _refuse_inside_a_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"{what} was called from inside a running event loop; await the coroutine instead "
        "(use the hook's async methods in triggers and async tasks)"
    )


def _open_loops() -> list[asyncio.AbstractEventLoop]:
    loops = getattr(_THREAD, "loops", None)
    if loops is None:
        loops = _THREAD.loops = []
    return loops


@contextlib.contextmanager
def _private_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A new event loop that this thread's :func:`run_sync` calls use until exit; then the tasks left on it
    are cancelled (as ``asyncio.run`` does) and it is closed."""
    loop = asyncio.new_event_loop()
    loops = _open_loops()
    loops.append(loop)
    try:
        yield loop
    finally:
        loops.remove(loop)
        try:
            _cancel_left_over_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result: on the loop of the innermost iteration or hold open
    in this thread (sharing its connection), else on a fresh event loop (``asyncio.run``: Ctrl-C cancels it
    cleanly, tasks left behind are cancelled).

    Raises ``RuntimeError`` when called from a thread that already runs an event loop (a trigger,
    an async task): blocking there would deadlock, so ``await`` the coroutine instead.
    """
    try:
        _refuse_inside_a_loop("run_sync()")
    except RuntimeError:
        coro.close()
        raise
    loops = _open_loops()
    if loops:
        return loops[-1].run_until_complete(coro)
    return asyncio.run(coro)


@contextlib.contextmanager
def hold(context: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """Enter ``context`` on a private event loop, yield its value, and exit it when the block ends; inside,
    this thread's :func:`run_sync` calls run on that loop (what ``context`` opened stays open for them)."""
    _refuse_inside_a_loop("hold()")
    with _private_loop() as loop:
        value = loop.run_until_complete(context.__aenter__())
        try:
            yield value
        except BaseException:
            if not loop.run_until_complete(context.__aexit__(*sys.exc_info())):
                raise
        else:
            loop.run_until_complete(context.__aexit__(None, None, None))


def iterate_blocking(source: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from synchronous code, on a private event loop.

    Closing the iterator early (``limit()``, a task failure) closes ``source`` so it can delete its
    consumer and close its connection. At the end, tasks the work left behind are cancelled, as
    ``asyncio.run`` does. Until then, this thread's :func:`run_sync` calls run on the iteration's loop.
    """
    _refuse_inside_a_loop("iterate_blocking()")
    with _private_loop() as loop:
        try:
            while True:
                try:
                    item = loop.run_until_complete(source.__anext__())  # type: ignore[arg-type]
                except StopAsyncIteration:
                    break
                yield item
        finally:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                loop.run_until_complete(aclose())


def _cancel_left_over_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if tasks:
        loop.run_until_complete(asyncio.gather(*(stop_task(task) for task in tasks)))
