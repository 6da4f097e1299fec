"""What the JetStream triggers share: which errors mean "try again later", the unreachable clock, fixed-rate polling."""

from __future__ import annotations

import asyncio
import logging
import time

import nats.errors
import nats.js.errors
from airflow.triggers.base import TriggerEvent

from airflow_provider_jetstream.core.errors import JetStreamDomainUnavailableError
from airflow_provider_jetstream.core.replication_report import format_seconds
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook

#: Errors after which a later check may succeed: the domain answers again, the client reconnected.
#: A closed connection (reconnect attempts exhausted) is not one: the trigger fails and Airflow retries.
TRANSIENT_ERRORS = (
    JetStreamDomainUnavailableError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,  # the 503 a JetStream API request gets when no server answers
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
)


def transient_reason(hook: JetStreamHook, err: BaseException) -> str:
    """Why a check could not be made, in words (nats-py's 503 error prints as ``code=None``)."""
    if isinstance(err, (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)):
        return (
            f"no JetStream responded in {hook.describe_target()}: a leaf that is offline, or a wrong "
            "domain name? Waiting"
        )
    if isinstance(err, nats.errors.TimeoutError):
        return (
            f"JetStream in {hook.describe_target()} did not answer in time: a leaf that is offline, or a "
            "wrong domain name? Waiting"
        )
    return str(err) or type(err).__name__


class UnreachableClock:
    """Since when a sensor's target has not answered, and whether that outlasted a bound.

    :param timeout: seconds the target may stay unanswering before the sensor fails
        (``unreachable_timeout``); None: no bound (the sensor's own timeout applies).
    :param since: wall-clock time (epoch seconds) it was first seen unanswering, from the sensor's
        state; None: it answered last time.
    """

    def __init__(self, timeout: float | None, since: float | None = None, heartbeat: float = 60.0) -> None:
        self.timeout = timeout
        self.since = since
        self.heartbeat = heartbeat
        self._logged: float | None = None

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
        """Log the first unanswered check, then once per ``heartbeat``, not every poll."""
        now = time.time() if now is None else now
        if self._logged is None or now - self._logged >= self.heartbeat:
            self._logged = now
            return True
        return False

    def clear(self) -> None:
        self.since = None
        self._logged = None

    def on_no_answer(self, what: str, reason: str, log: logging.Logger | logging.LoggerAdapter) -> TriggerEvent | None:
        """A trigger's check of ``what`` got no answer for ``reason``: the error event once that
        outlasted ``timeout``, else None (logging the reason at the first miss and each heartbeat)."""
        failure = self.note(reason)
        if failure:
            return TriggerEvent({"status": "error", "reason": "unreachable", "message": f"{what}: {failure}"})
        if self.should_log():
            log.info("%s: cannot check yet: %s", what, reason)
        return None


class PollClock:
    """Fixed-rate polling for the lag triggers: each check is due ``interval`` seconds after the
    previous one was due, not after it ended, so slow answers (a busy server, a thousand triggers
    on one connection) do not stretch the period; after an overrun the next check starts at once."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.due = asyncio.get_running_loop().time()

    async def wait(self) -> None:
        now = asyncio.get_running_loop().time()
        self.due = max(self.due + self.interval, now)
        await asyncio.sleep(self.due - now)
