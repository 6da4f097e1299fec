"""The sync bridge (``core/sync.py``): blocking calls inside an open hold or held iteration run on its loop,
in a thread of its own, and share what is open there; elsewhere each runs on a fresh loop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator

import pytest

from airflow_provider_jetstream.core.sync import hold, iterate_blocking, iterate_held, run_sync
from tests.support.waiting import scaled


async def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


class _Opened:
    """An async context that records its loop and how it was left."""

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


def _interrupt_when(started: threading.Event, handled: threading.Event) -> None:
    """Ctrl-C for this thread (the main one, where Python raises it) once ``started`` is set, aimed at it;
    again until ``handled`` is set: a signal that lands just before the thread blocks wakes nothing."""
    target = threading.get_ident()

    def interrupt() -> None:
        started.wait(scaled(30))
        while True:
            signal.pthread_kill(target, signal.SIGINT)
            if handled.wait(scaled(2)):
                return

    threading.Thread(target=interrupt, daemon=True).start()


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


def test_the_held_loop_runs_between_calls() -> None:
    """What the hold opened keeps running while the caller works (a connection answers the server's pings)."""
    ticks = threading.Event()

    @contextlib.asynccontextmanager
    async def ticking() -> AsyncIterator[None]:
        async def tick() -> None:
            await asyncio.sleep(0.01)
            ticks.set()

        task = asyncio.ensure_future(tick())
        yield
        await task

    with hold(ticking()):
        assert ticks.wait(30), "the loop did not run while the caller waited"


def test_an_error_inside_a_hold_reaches_its_context_and_the_caller() -> None:
    opened = _Opened()
    with pytest.raises(KeyError), hold(opened.context()):
        raise KeyError("boom")
    assert opened.exited == [KeyError]


def test_an_interrupted_call_is_cancelled_before_the_interruption_goes_on() -> None:
    """Ctrl-C (or Airflow stopping the task) while a call waits: the call is cancelled, its clean-up done,
    before the interruption reaches the caller; nothing of it runs on later."""
    events: list[str] = []
    started, handled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            events.append("cleaned up")
            handled.set()

    with hold(_Opened().context()):
        _interrupt_when(started, handled)
        with pytest.raises(KeyboardInterrupt):
            run_sync(forever())
        events.append("interrupted")
        assert run_sync(_loop()) is not None  # the hold still takes calls
    assert events == ["cleaned up", "interrupted"]


def test_a_held_iteration_shares_its_loop_until_it_ends() -> None:
    opened = _Opened()
    seen = []
    for _, loop in iterate_held(opened.context(), _count(3)):
        seen.append(loop)
        assert run_sync(_loop()) is loop
    assert len(set(seen)) == 1 and seen[0] is opened.loop and seen[0].is_closed()
    assert opened.exited == [None]
    # Left early: the context exits as normally, and the iteration's loop is no longer used.
    opened = _Opened()
    iteration = iterate_held(opened.context(), _count(3))
    _, left = next(iteration)
    iteration.close()
    assert opened.exited == [None] and run_sync(_loop()) is not left


def test_a_blocking_iteration_takes_no_other_calls() -> None:
    """``iterate_blocking`` (Spark's) drives its loop only while asked for an item."""
    for _, loop in iterate_blocking(_count(2)):
        assert run_sync(_loop()) is not loop


def test_the_innermost_hold_wins_and_other_threads_do_not_share_it() -> None:
    opened = _Opened()
    with hold(opened.context()):
        for _, loop in iterate_held(_Opened().context(), _count(1)):
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


class _Ready:
    """An awaitable that is not a coroutine."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __await__(self):  # type: ignore[no-untyped-def]
        return self.value
        yield


class _Countdown:
    """An async iterator whose ``__anext__`` returns a plain awaitable."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __aiter__(self) -> _Countdown:
        return self

    def __anext__(self) -> _Ready:
        if self.n == 0:
            raise StopAsyncIteration
        self.n -= 1
        return _Ready(self.n)


def test_any_awaitable_and_any_exception_cross_a_hold_as_they_would_asyncio_run() -> None:
    async def exits() -> None:
        raise SystemExit(3)

    opened = _Opened()
    with hold(opened.context()):
        with pytest.raises(SystemExit):
            run_sync(exits())
        assert run_sync(_loop()) is opened.loop  # the held loop still runs
    assert list(iterate_held(_Opened().context(), _Countdown(3))) == [2, 1, 0]
    assert list(iterate_blocking(_Countdown(3))) == [2, 1, 0]


def test_an_interrupted_blocking_iteration_raises_the_interruption_after_closing_its_source() -> None:
    events: list[str] = []
    started, handled = threading.Event(), threading.Event()

    async def stuck() -> AsyncIterator[int]:
        yield 1
        started.set()
        try:
            await asyncio.Event().wait()
            yield 2
        finally:
            events.append("closed")
            handled.set()

    _interrupt_when(started, handled)
    with pytest.raises(KeyboardInterrupt):
        list(iterate_blocking(stuck()))
    assert events == ["closed"]


def test_a_hold_left_open_does_not_keep_the_process_from_ending() -> None:
    script = (
        "import asyncio, contextlib\n"
        "from airflow_provider_jetstream.core.sync import hold, iterate_held\n"
        "@contextlib.asynccontextmanager\n"
        "async def context():\n"
        "    yield\n"
        "async def items():\n"
        "    yield 1\n"
        "    yield 2\n"
        "LEFT = iterate_held(context(), items())\n"
        "next(LEFT)\n"
        "OPEN = hold(context())\n"
        "OPEN.__enter__()\n"
        "print('done')\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(60))
    assert ended.returncode == 0 and ended.stdout.strip() == "done", ended.stderr
