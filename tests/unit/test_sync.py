"""The sync bridge (``core/sync.py``): blocking calls inside an open iteration or hold run on its loop, and
share what is open there; elsewhere each runs on a fresh loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import pytest

from airflow_provider_jetstream.core.sync import hold, iterate_blocking, run_sync


async def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


class _Opened:
    """An async context that records how it was left."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.exited: list[type[BaseException] | None] = []

    @contextlib.asynccontextmanager
    async def context(self) -> AsyncIterator[str]:
        self.loop = asyncio.get_running_loop()
        try:
            yield "value"
        except BaseException as err:
            self.exited.append(type(err))
            raise
        else:
            self.exited.append(None)


async def _count(n: int) -> AsyncIterator[tuple[int, asyncio.AbstractEventLoop]]:
    for i in range(n):
        yield i, asyncio.get_running_loop()


def test_run_sync_alone_runs_each_coroutine_on_a_fresh_loop() -> None:
    first, second = run_sync(_loop()), run_sync(_loop())
    assert first is not second and first.is_closed() and second.is_closed()


def test_run_sync_inside_a_hold_shares_its_loop_and_the_hold_exits_once() -> None:
    opened = _Opened()
    with hold(opened.context()) as value:
        assert value == "value"
        assert run_sync(_loop()) is opened.loop
        assert run_sync(_loop()) is opened.loop
        assert opened.exited == []
    assert opened.exited == [None] and opened.loop is not None and opened.loop.is_closed()
    assert run_sync(_loop()) is not opened.loop


def test_an_error_inside_a_hold_reaches_its_context_and_the_caller() -> None:
    opened = _Opened()
    with pytest.raises(KeyError), hold(opened.context()):
        raise KeyError("boom")
    assert opened.exited == [KeyError]


def test_run_sync_between_items_of_a_blocking_iteration_shares_its_loop() -> None:
    seen = []
    for _, loop in iterate_blocking(_count(3)):
        seen.append(loop)
        assert run_sync(_loop()) is loop
    assert len(set(seen)) == 1 and seen[0].is_closed()
    # Left early: the iteration's loop is no longer used.
    iteration = iterate_blocking(_count(3))
    _, loop = next(iteration)
    iteration.close()
    assert run_sync(_loop()) is not loop


def test_the_innermost_open_loop_wins_and_other_threads_do_not_share_it() -> None:
    opened = _Opened()
    with hold(opened.context()):
        for _, loop in iterate_blocking(_count(1)):
            assert run_sync(_loop()) is loop
        assert run_sync(_loop()) is opened.loop
        elsewhere: list[asyncio.AbstractEventLoop] = []
        thread = threading.Thread(target=lambda: elsewhere.append(run_sync(_loop())))
        thread.start()
        thread.join()
        assert elsewhere and elsewhere[0] is not opened.loop


def test_hold_refuses_inside_a_running_loop() -> None:
    async def inside() -> None:
        context = _Opened().context()
        with pytest.raises(RuntimeError, match="await the coroutine instead"), hold(context):
            pass

    asyncio.run(inside())
