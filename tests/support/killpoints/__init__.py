"""Kill points for the packaged stream_to_parquet job, installed from outside it (tests only).

The job has no fault switch. A test wraps the job's step methods so that an action runs at a
named point of a run: by default SIGKILL to the whole process group (spark-submit, its JVM and the
Python driver), as a crash would; in-process tests pass their own action instead. For spark-submit,
``run_job.py`` (beside this file) installs a kill point, then runs the job's ``main``.

=====================  ====================================================================
point                  the action runs
=====================  ====================================================================
``before_write``       after the claim, before the commit step (nothing written yet)
``during_write``       once the write step has started its first task's files (local output)
``after_write``        after the write step, before the commit marker
``before_checkpoint``  after the commit step, before the checkpoint is advanced
=====================  ====================================================================
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

KILL_POINTS = ("before_write", "during_write", "after_write", "before_checkpoint")

log = logging.getLogger("killpoints")


def kill_process_group(point: str) -> None:
    """What a crash at ``point`` does: SIGKILL to this process's group."""
    log.error("kill point %s: killing the job's process group", point)
    sys.stderr.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)


def install(job: Any, point: str, action: Callable[[str], None] = kill_process_group) -> None:
    """Make ``action(point)`` run at ``point`` of ``job`` (a ``StreamToParquetJob``, or the class itself)."""
    if point == "before_write":
        _wrap(job, "commit", lambda step: _before(step, lambda: action(point)))
    elif point == "during_write":
        _wrap(job, "write", lambda step: _while_writing(step, lambda: action(point)))
    elif point == "after_write":
        _wrap(job, "write", lambda step: _after(step, lambda: action(point)))
    elif point == "before_checkpoint":
        _wrap(job, "advance", lambda step: _before(step, lambda: action(point)))
    else:
        raise ValueError(f"kill point {point!r}: use one of {', '.join(KILL_POINTS)}")


def _wrap(job: Any, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    step = getattr(job, name)
    if isinstance(job, type):  # a class: wrap the method for every instance

        @functools.wraps(step)
        def method(self: Any, *args: Any) -> Any:
            return wrapper(functools.partial(step, self))(*args)

        setattr(job, name, method)
    else:
        setattr(job, name, functools.wraps(step)(wrapper(step)))


def _before(step: Callable[..., Any], action: Callable[[], None]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        action()
        return step(*args)

    return run


def _after(step: Callable[..., Any], action: Callable[[], None]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        result = step(*args)
        action()
        return result

    return run


def _while_writing(write: Callable[..., Any], action: Callable[[], None]) -> Callable[..., Any]:
    """The write step, with ``action`` run (from a watcher thread) as soon as a write task has
    started its files under the local staging directory."""

    def run(start: int, end: int, staging: str) -> Any:
        path = staging.removeprefix("file:")
        tasks = os.path.join(path, "_temporary", "0", "_temporary")
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.005):
                if os.path.isdir(tasks) and os.listdir(tasks):
                    action()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            return write(start, end, staging)
        finally:
            done.set()

    return run
