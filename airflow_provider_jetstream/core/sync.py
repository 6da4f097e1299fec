"""The one bridge from synchronous Airflow code (operators, sensors' poke) to nats-py's asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh event loop and return its result.

    Raises ``RuntimeError`` when called from a thread that already runs an event loop (a trigger,
    an async task): blocking there would deadlock, so ``await`` the coroutine instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop here: run outside the except block, so a failure's traceback stays clean
    else:
        coro.close()
        raise RuntimeError(
            "run_sync() was called from inside a running event loop; await the coroutine instead "
            "(use the hook's async methods in triggers and async tasks)"
        )
    return asyncio.run(coro)
