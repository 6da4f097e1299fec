"""The one bridge from synchronous code (operators, sensors' pokes, Spark tasks) to nats-py's asyncio.

Four shapes: :func:`run_sync` runs one coroutine; :func:`iterate_blocking` drives an async iterator one
item at a time on a private event loop, driven only while the caller waits for the next item, so a slow
Spark task leaves unread data in the socket (bounded by the pull buffer) instead of in memory; :func:`hold`
keeps an async context (the hook's connection) open for a block of synchronous code, and
:func:`iterate_held` iterates inside one.

A hold runs its event loop in a thread of its own for as long as the block is open, so the connection keeps
answering the server (its pings) while the caller's code works between calls; the calls of the thread
that opened it (:func:`run_sync`) run there and share what is open (the hook's one connection per loop):
the ``ack()`` of a message consumed in a blocking loop settles on the loop's connection instead of opening
one for the one message. Inside a running event loop (a trigger, an async task) blocking would deadlock:
every shape refuses, and the coroutine is to be awaited instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from airflow_provider_jetstream.core.tasks import CLEANUP_GRACE, stop_task

T = TypeVar("T")

#: Per thread: ``holds``, the open holds' loops (:class:`_LoopThread`), the innermost last.
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


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result: on the loop of the innermost :func:`hold` open in
    this thread (sharing its connection), else on a fresh event loop (``asyncio.run``: Ctrl-C cancels it
    cleanly, tasks left behind are cancelled).

    Raises ``RuntimeError`` when called from a thread that already runs an event loop (a trigger,
    an async task): blocking there would deadlock, so ``await`` the coroutine instead.
    """
    try:
        _refuse_inside_a_loop("run_sync()")
    except RuntimeError:
        coro.close()
        raise
    holds = _holds()
    if holds:
        return holds[-1].call(coro)
    return asyncio.run(coro)


class _LoopThread:
    """An event loop running in a daemon thread of its own until :meth:`close`; :meth:`call` runs a
    coroutine there and waits for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="jetstream-hold", daemon=True)
        self.thread.start()

    def call(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``'s result, awaited on the loop; what it raises (``SystemExit`` too) is raised here.
        Interrupted while it waits (Ctrl-C, the task being stopped), it cancels the work and waits until it
        ended (cancelling again every :data:`~airflow_provider_jetstream.core.tasks.CLEANUP_GRACE` seconds)
        before re-raising, as ``asyncio.run`` does: nothing of an interrupted call runs on later."""
        if threading.current_thread() is self.thread or not self.thread.is_alive() or sys.is_finalizing():
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError("the held event loop cannot take a blocking call from its own thread or once stopped")
        outcome: concurrent.futures.Future[T] = concurrent.futures.Future()
        tasks: list[asyncio.Task[None]] = []

        async def run() -> None:
            try:
                result = await awaitable
            except BaseException as err:  # re-raised in the caller's thread, never in the loop's
                outcome.set_exception(err)
            else:
                outcome.set_result(result)

        def start() -> None:
            if not outcome.done():
                tasks.append(self.loop.create_task(run()))

        def stop() -> None:
            if tasks:
                tasks[0].cancel()
            elif not outcome.done():  # interrupted before it was scheduled: it never runs
                if inspect.iscoroutine(awaitable):
                    awaitable.close()
                outcome.set_exception(asyncio.CancelledError())

        try:
            self.loop.call_soon_threadsafe(start)
            return outcome.result()
        except BaseException:
            while not outcome.done() and self.thread.is_alive():
                self.loop.call_soon_threadsafe(stop)  # after start() if it was scheduled: callbacks run in order
                concurrent.futures.wait([outcome], timeout=CLEANUP_GRACE)
            raise

    def close(self) -> None:
        """Cancel the tasks left on the loop, stop it and close it. Nothing once the interpreter is shutting
        down: its thread no longer runs then (the process ends anyway)."""
        if sys.is_finalizing():
            return
        try:
            self.call(_wind_down())
        finally:
            if self.thread.is_alive():
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join()
            self.loop.close()


def _holds() -> list[_LoopThread]:
    holds = getattr(_THREAD, "holds", None)
    if holds is None:
        holds = _THREAD.holds = []
    return holds


@contextlib.contextmanager
def hold(context: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """Enter ``context`` on an event loop running in a thread of its own, yield its value, and exit it when
    the block ends; until then, this thread's :func:`run_sync` calls run on that loop (what ``context``
    opened stays open, and keeps answering the server, between them)."""
    with _hold(context) as (_, value):
        yield value


@contextlib.contextmanager
def _hold(context: AbstractAsyncContextManager[T]) -> Iterator[tuple[_LoopThread, T]]:
    _refuse_inside_a_loop("hold()")
    held = _LoopThread()
    holds = _holds()
    try:
        value = held.call(context.__aenter__())
        holds.append(held)
        try:
            yield held, value
        except BaseException:
            if not held.call(context.__aexit__(*sys.exc_info())):
                raise
        else:
            held.call(context.__aexit__(None, None, None))
    finally:
        if held in holds:
            holds.remove(held)
        held.close()


def iterate_held(context: AbstractAsyncContextManager[Any], source: AsyncIterator[T]) -> Iterator[T]:
    """Iterate ``source`` from synchronous code inside a :func:`hold` of ``context``: until the iteration
    ends, this thread's :func:`run_sync` calls (an item's ``ack()``) share what ``context`` opened. Closing
    the iterator early (leaving a ``for`` loop) closes ``source``, then exits ``context``: close an iteration
    left unfinished, or it keeps taking the thread's calls until it is collected."""
    with _hold(context) as (held, _):
        try:
            yield from _iterate(source, held.call)
        except GeneratorExit:
            return  # closed early (source closed already): a normal end, the context exits cleanly


def iterate_blocking(source: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from synchronous code, on a private event loop.

    Closing the iterator early (``limit()``, a task failure) closes ``source`` so it can delete its
    consumer and close its connection. At the end, tasks the work left behind are cancelled, as
    ``asyncio.run`` does.
    """
    _refuse_inside_a_loop("iterate_blocking()")
    loop = asyncio.new_event_loop()

    def drive(awaitable: Awaitable[T]) -> T:
        """Run the loop until ``awaitable`` is done; interrupted, its task is stopped before re-raising."""
        task = asyncio.ensure_future(awaitable, loop=loop)
        try:
            return loop.run_until_complete(task)
        except BaseException:
            if not task.done():
                loop.run_until_complete(stop_task(task))
            raise

    try:
        yield from _iterate(source, drive)
    finally:
        try:
            loop.run_until_complete(_wind_down())
        finally:
            loop.close()


def _iterate(source: AsyncIterator[T], run: Callable[[Awaitable[Any]], Any]) -> Iterator[T]:
    """``source``'s items, each awaited through ``run``; ``source`` closed when the iteration ends, early too."""
    try:
        while True:
            try:
                item = run(source.__anext__())  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            run(aclose())


async def _wind_down() -> None:
    """Cancel the running loop's other tasks (as ``asyncio.run`` does), then shut its async generators and
    default executor down."""
    loop = asyncio.get_running_loop()
    current = asyncio.current_task()
    await asyncio.gather(*(stop_task(task) for task in asyncio.all_tasks() if task is not current))
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()
