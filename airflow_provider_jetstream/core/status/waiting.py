"""Waiting for a condition one check at a time: the one wait loop of every sensor and trigger of the package.

A condition is a check coroutine that returns a reading (``done``, optionally ``failed`` and
``failed_reason``, and ``to_xcom()``: a consumer's lag, a KV key, a stream's replication). A sensor makes
one :func:`wait_step` per poke; a trigger awaits :func:`wait_until_final`, which repeats the same step at
a fixed rate. Both get the same :class:`WaitOutcome`, and both classify errors once, with
:func:`~airflow_provider_jetstream.core.errors.disposition`:

- a refusal (a missing stream, a bad argument, a permission refused...) ends the wait at once;
- "nobody answered" (a leaf that is offline, a hub node away, a leader being elected) is waited for, up
  to ``unreachable_timeout``, logged at the first miss and once a minute (:class:`UnreachableClock`);
- anything else ends this attempt, so that Airflow's retries apply.

Airflow-free: the sensors and triggers (Airflow layers) build on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import nats.errors

from airflow_provider_jetstream.core.errors import (
    REFUSE,
    RETRY,
    WAIT,
    JetStreamConfigError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
    JetStreamReplicationError,
    disposition,
)
from airflow_provider_jetstream.core.status.report import format_seconds
from airflow_provider_jetstream.core.tasks import wait_task

#: Seconds between two "cannot check yet" lines while a target does not answer.
LOG_HEARTBEAT = 60.0

DONE = "done"
WAITING = "waiting"
FAILED = "failed"


class Reading(Protocol):
    """What one check of a condition read: whether it holds, and its XCom value."""

    @property
    def done(self) -> bool: ...

    def to_xcom(self) -> Any: ...


@dataclass(frozen=True)
class WaitOutcome:
    """What one step of waiting says: :data:`DONE` (with ``xcom``), :data:`WAITING`, or :data:`FAILED`.

    A failure carries its ``message``, a short ``reason`` (``not_found``, ``invalid``, ``permission``,
    ``replication_error``, ``unreachable``, ``low_headroom``, ``connection_closed`` or ``error``), its ``disposition``
    (:data:`~airflow_provider_jetstream.core.errors.REFUSE`: fail at once;
    :data:`~airflow_provider_jetstream.core.errors.RETRY`: Airflow's retries apply) and, when an error
    caused it, the ``error``.
    """

    status: str
    xcom: Any = None
    message: str = ""
    reason: str = ""
    disposition: str = ""
    error: BaseException | None = None

    def event(self, key: str) -> dict[str, Any]:
        """The trigger event's payload: ``{"status": "success", key: xcom}`` or ``{"status": "error",
        "reason", "message", "disposition"}``."""
        if self.status == DONE:
            return {"status": "success", key: self.xcom}
        return {"status": "error", "reason": self.reason, "message": self.message, "disposition": self.disposition}


#: The ``reason`` of a failure by the error's class (the first match wins).
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (JetStreamNotFoundError, "not_found"),
    (JetStreamConfigError, "invalid"),
    (JetStreamPermissionError, "permission"),
    (JetStreamReplicationError, "replication_error"),
    (nats.errors.ConnectionClosedError, "connection_closed"),
)


def failure_of(error: BaseException, what: str = "") -> WaitOutcome:
    """The :data:`FAILED` outcome of an error that is not waited for (a refusal, or one for retries)."""
    reason = next((name for cls, name in _REASONS if isinstance(error, cls)), "error")
    if isinstance(error, nats.errors.ConnectionClosedError):
        message = f"{what}: the NATS connection closed (reconnects exhausted)" if what else "the NATS connection closed"
    else:
        message = str(error) or type(error).__name__
    kind = disposition(error)
    return WaitOutcome(
        FAILED, message=message, reason=reason, disposition=REFUSE if kind == REFUSE else RETRY, error=error
    )


class UnreachableClock:
    """Since when a waited-for target has not answered, and whether that outlasted a bound.

    :param timeout: seconds the target may stay unanswering before the wait fails
        (``unreachable_timeout``); None: no bound (the sensor's own timeout applies).
    :param since: wall-clock time (epoch seconds) it was first seen unanswering, kept across checks by
        the sensor and handed to the trigger; None: it answered last time.
    :param logged: when an unanswered check was last logged (epoch seconds), kept across checks like ``since``
        (a sensor makes a new clock at each poke); None (default): not yet.
    """

    def __init__(self, timeout: float | None, since: float | None = None, logged: float | None = None) -> None:
        self.timeout = timeout
        self.since = since
        self.logged = logged

    def note(self, reason: str, now: float | None = None) -> str | None:
        """Record a check that got no answer; return the failure message once it outlasted the bound."""
        now = time.time() if now is None else now
        if self.since is None:
            self.since = now
        elapsed = now - self.since
        if self.timeout is not None and elapsed > self.timeout:
            return (
                f"{reason}; no answer for {format_seconds(elapsed)} > unreachable_timeout "
                f"{format_seconds(self.timeout)}"
            )
        return None

    def should_log(self, now: float | None = None) -> bool:
        """Log the first unanswered check, then once per ``LOG_HEARTBEAT`` seconds, not every check."""
        now = time.time() if now is None else now
        if self.logged is None or now - self.logged >= LOG_HEARTBEAT:
            self.logged = now
            return True
        return False

    def clear(self) -> None:
        self.since = None
        self.logged = None


async def wait_step(
    check: Callable[[], Awaitable[Reading]],
    unreachable: UnreachableClock,
    *,
    what: str,
    no_answer: Callable[[BaseException], str],
    log: logging.Logger | logging.LoggerAdapter,
) -> WaitOutcome:
    """One check of a condition (``what`` names it in messages), its errors classified once.

    A reading whose ``failed`` is set (waiting cannot help: a replication error beyond its grace period)
    fails with its ``failed_reason``. An error nobody answered for (``no_answer(error)`` says why, in
    words) is waited for until ``unreachable`` says it lasted too long.
    """
    try:
        # In a task of its own: a cancellation arriving with a reply is not lost.
        reading = await wait_task(check())
    except Exception as err:
        if disposition(err) != WAIT:
            return failure_of(err, what)
        reason = no_answer(err)
        failure = unreachable.note(reason)
        if failure:
            return WaitOutcome(FAILED, message=f"{what}: {failure}", reason="unreachable", disposition=REFUSE)
        if unreachable.should_log():
            log.info("%s: cannot check yet: %s", what, reason)
        return WaitOutcome(WAITING)
    unreachable.clear()
    failed = getattr(reading, "failed", None)
    if failed:
        target = getattr(reading, "target", "")
        reason = getattr(reading, "failed_reason", "replication_error")
        message = f"{what} in {target}: {failed}" if target else f"{what}: {failed}"
        return WaitOutcome(FAILED, message=message, reason=reason, disposition=REFUSE)
    if reading.done:
        return WaitOutcome(DONE, xcom=reading.to_xcom())
    return WaitOutcome(WAITING)


class PollClock:
    """Fixed-rate polling: each check is due ``interval`` seconds after the previous one was due, not
    after it ended, so slow answers (a busy server, a thousand triggers on one connection) do not
    stretch the period; after an overrun (or a check that waited itself, as a KV watch does) the next
    check starts at once."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.due = asyncio.get_running_loop().time()

    async def wait(self) -> None:
        now = asyncio.get_running_loop().time()
        self.due = max(self.due + self.interval, now)
        await asyncio.sleep(self.due - now)


async def wait_until_final(step: Callable[[], Awaitable[WaitOutcome]], interval: float) -> WaitOutcome:
    """Repeat ``step`` every ``interval`` seconds (fixed rate) until it is done or failed."""
    clock = PollClock(interval)
    while True:
        outcome = await step()
        if outcome.status != WAITING:
            return outcome
        await clock.wait()
