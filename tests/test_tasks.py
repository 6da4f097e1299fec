"""Awaiting that keeps cancellations (``core/tasks.py``): a loop cancelled as its awaited item arrives stops.

Before Python 3.12 ``asyncio.wait_for`` returned the item and lost the cancellation: the await-message
sensor's puller, cancelled as a heartbeat came in, pulled for ever and its poke never returned.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
from pathlib import Path

import pytest

from airflow_provider_jetstream.core.tasks import next_item, stop_task, wait_task
from tests.support.syntax import parse_file

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_provider_jetstream"


async def _pulling(queue: asyncio.Queue[int], waiting: asyncio.Event) -> None:
    while True:
        waiting.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await next_item(queue, 0.5)


async def _never() -> None:
    """Waits until cancelled."""
    await asyncio.Event().wait()


@pytest.mark.parametrize("turns", range(6))
def test_a_loop_cancelled_as_its_item_arrives_stops(turns: int) -> None:
    """Cancelled 0-5 loop turns after the item was put: the task ends cancelled, at once."""

    async def scenario() -> bool:
        queue: asyncio.Queue[int] = asyncio.Queue()
        waiting = asyncio.Event()
        task = asyncio.create_task(_pulling(queue, waiting))
        await waiting.wait()  # the loop waits for its next item
        queue.put_nowait(1)
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        return bool(done) and task.cancelled()

    assert asyncio.run(scenario())


def test_wait_task_bounds_an_await_and_returns_what_came_in_time() -> None:
    async def scenario() -> tuple[int, bool]:
        queue: asyncio.Queue[int] = asyncio.Queue()
        queue.put_nowait(7)
        first = await next_item(queue, 1)
        try:
            await wait_task(queue.get(), 0.05)
        except asyncio.TimeoutError:
            return first, True
        return first, False

    assert asyncio.run(scenario()) == (7, True)


def test_stop_task_ends_a_task_that_swallowed_a_cancellation() -> None:
    """A task that takes a cancellation for a result once (what ``wait_for`` did) is cancelled again."""

    async def swallows_once() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # lost, as inside wait_for
            await _never()
        await _never()

    async def scenario() -> bool:
        task = asyncio.create_task(swallows_once())
        await asyncio.sleep(0)
        await asyncio.wait_for(stop_task(task, grace=0.05), 5)
        return task.cancelled()

    assert asyncio.run(scenario())


def test_the_package_never_calls_asyncio_wait_for() -> None:
    """Every bounded await goes through ``core/tasks.py``."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.Attribute) and node.attr == "wait_for":
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []


def test_a_caller_cancelled_while_stopping_a_task_goes_on_only_after_its_clean_up() -> None:
    """A trigger cancelled while it stops its puller: the puller's clean-up (its naks) ends before the
    trigger goes on to close the connection."""
    order: list[str] = []
    cleaning, release = asyncio.Event(), asyncio.Event()

    async def cleans_up_slowly() -> None:
        try:
            await _never()
        finally:
            cleaning.set()
            await release.wait()  # the clean-up takes a while (its naks)
            order.append("clean-up done")

    async def caller(task: asyncio.Task[None]) -> None:
        try:
            await stop_task(task)
        finally:
            order.append("caller goes on")

    async def scenario() -> bool:
        task = asyncio.create_task(cleans_up_slowly())
        await asyncio.sleep(0)
        stopping = asyncio.create_task(caller(task))
        await cleaning.wait()  # stop_task cancelled the task; its clean-up runs
        stopping.cancel()
        for _ in range(5):  # turns in which a caller that did not wait would go on
            await asyncio.sleep(0)
        release.set()
        await asyncio.wait({stopping}, timeout=5)
        return stopping.cancelled()

    assert asyncio.run(scenario())
    assert order == ["clean-up done", "caller goes on"]
