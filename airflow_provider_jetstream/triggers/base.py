"""What the JetStream triggers share: the waiting triggers' base class, which errors mean "try again
later", which end the trigger (and the event each gives), the unreachable clock, fixed-rate polling."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import nats.errors
import nats.js.errors
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
)
from airflow_provider_jetstream.core.manage.specs.durations import optional_duration_seconds
from airflow_provider_jetstream.core.status.report import format_seconds
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


#: Errors that end a trigger with an error event (see :func:`error_event`): waiting cannot fix them,
#: or the connection is gone for good.
FINAL_ERRORS = (JetStreamError, nats.errors.ConnectionClosedError)

#: The error event ``reason`` of each final error class, the first match wins.
_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (JetStreamNotFoundError, "not_found"),
    (JetStreamConfigError, "invalid"),
    (JetStreamPermissionError, "permission"),
    (JetStreamError, "error"),
)


def error_event(err: BaseException, conn_id: str) -> TriggerEvent:
    """The trigger's ``{"status": "error", "reason", "message"}`` event for one of :data:`FINAL_ERRORS`:
    ``not_found``, ``invalid``, ``permission``, ``error`` or ``connection_closed`` (reconnects exhausted)."""
    if isinstance(err, nats.errors.ConnectionClosedError):
        message = f"connection {conn_id!r}: the NATS connection closed (reconnects exhausted)"
        return TriggerEvent({"status": "error", "reason": "connection_closed", "message": message})
    reason = next(name for cls, name in _REASONS if isinstance(err, cls))
    return TriggerEvent({"status": "error", "reason": reason, "message": str(err)})


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


class JetStreamWaitTrigger(BaseTrigger):
    """What the waiting triggers (consumer lag, replication lag, KV key) share: where JetStream is,
    how long it may go unanswering, what the sensor's checks left, and their serialization.

    :param jetstream_conn_id: Airflow connection id (resolved in the triggerer).
    :param domain: JetStream domain. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param unreachable_timeout: how long (seconds, or text like ``"10m"``) the target may go without
        answering before the trigger fails; None (default): no bound (the sensor's timeout applies).
    :param state: what the sensor's checks so far left (``{"unreachable_since": epoch seconds}``, ...).
    """

    #: A subclass's own constructor arguments, each kept in the attribute of its name: serialized
    #: with the shared ones, so the triggerer rebuilds the trigger from them.
    fields: tuple[str, ...] = ()

    def __init__(
        self,
        jetstream_conn_id: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.jetstream_conn_id = jetstream_conn_id
        self.domain = domain
        self.api_prefix = api_prefix
        self.unreachable_timeout = optional_duration_seconds(unreachable_timeout, "unreachable_timeout")
        self.state = dict(state or {})

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names = ("jetstream_conn_id", *self.fields, "domain", "api_prefix", "unreachable_timeout", "state")
        return f"{type(self).__module__}.{type(self).__qualname__}", {name: getattr(self, name) for name in names}

    def new_hook(self) -> JetStreamHook:
        """A hook for the trigger's connection and target (its checks share the triggerer's connection)."""
        return JetStreamHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)

    def unreachable_clock(self) -> UnreachableClock:
        """The clock of unanswered checks, going on from where the sensor's checks left it."""
        return UnreachableClock(self.unreachable_timeout, self.state.get("unreachable_since"))
