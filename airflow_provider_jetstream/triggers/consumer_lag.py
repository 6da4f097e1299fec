"""``JetStreamConsumerLagTrigger`` and the consumer-lag check it shares with the sensor's poke.

The check is the nats CLI's ``nats server check consumer --unprocessed-critical
--outstanding-ack-critical``: a consumer is done when its unprocessed messages (``num_pending``)
and outstanding acks (``num_ack_pending``), and optionally its redeliveries, are within bounds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamError,
    JetStreamNotFoundError,
    JetStreamPermissionError,
)
from airflow_provider_jetstream.core.jetstream_api import JetStreamApi
from airflow_provider_jetstream.core.specs.durations import optional_duration_seconds
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.triggers.base import TRANSIENT_ERRORS, PollClock, UnreachableClock, transient_reason


@dataclass(frozen=True)
class ConsumerLagCheck:
    """One reading of a consumer's counts and whether they are within the thresholds."""

    stream: str
    consumer: str
    target: str
    info: dict[str, Any]
    done: bool
    reason: str

    def to_xcom(self) -> dict[str, Any]:
        """The consumer's counts and its delivered and ack-floor sequences."""
        delivered = self.info.get("delivered") or {}
        ack_floor = self.info.get("ack_floor") or {}
        return {
            "stream": self.stream,
            "consumer": self.consumer,
            "target": self.target,
            "num_pending": self.info.get("num_pending", 0),
            "num_ack_pending": self.info.get("num_ack_pending", 0),
            "num_redelivered": self.info.get("num_redelivered", 0),
            "num_waiting": self.info.get("num_waiting", 0),
            "delivered": {
                "consumer_seq": delivered.get("consumer_seq", 0),
                "stream_seq": delivered.get("stream_seq", 0),
            },
            "ack_floor": {
                "consumer_seq": ack_floor.get("consumer_seq", 0),
                "stream_seq": ack_floor.get("stream_seq", 0),
            },
        }


def judge_consumer(
    info: dict[str, Any], max_pending: int, max_ack_pending: int, max_redelivered: int | None
) -> tuple[bool, str]:
    """``(done, reason)`` for a raw consumer info: every count within its bound, or which is not."""
    counts = [
        ("unprocessed (num_pending)", info.get("num_pending", 0), max_pending, "max_pending"),
        ("outstanding acks (num_ack_pending)", info.get("num_ack_pending", 0), max_ack_pending, "max_ack_pending"),
    ]
    if max_redelivered is not None:
        counts.append(
            ("redelivered (num_redelivered)", info.get("num_redelivered", 0), max_redelivered, "max_redelivered")
        )
    over = [f"{what} {value} > {name} {bound}" for what, value, bound, name in counts if value > bound]
    if over:
        return False, "; ".join(over)
    return True, ", ".join(f"{what} {value} <= {bound}" for what, value, bound, _ in counts)


async def check_consumer_lag(
    hook: JetStreamHook,
    stream: str,
    consumer: str,
    max_pending: int = 0,
    max_ack_pending: int = 0,
    max_redelivered: int | None = None,
) -> ConsumerLagCheck:
    """Read a consumer's info in the hook's domain and judge it against the thresholds.

    Raises :class:`JetStreamNotFoundError` when the stream or the consumer does not exist, and
    :class:`JetStreamDomainUnavailableError` when no JetStream answers for the domain.
    """
    async with hook.aconnect() as nc:
        config = await hook.aget_conn_config()
        target = hook.describe_target()
        api = JetStreamApi(nc, hook.resolve_api_prefix(), timeout=config.connect_timeout, target=target)
        info = await api.consumer_info(stream, consumer)  # a missing stream raises JetStreamNotFoundError
    if info is None:
        raise JetStreamNotFoundError(f"consumer {consumer!r} does not exist on stream {stream!r} in {target}")
    done, reason = judge_consumer(info, max_pending, max_ack_pending, max_redelivered)
    return ConsumerLagCheck(stream, consumer, target, info, done, reason)


class JetStreamConsumerLagTrigger(BaseTrigger):
    """Fires when a consumer's unprocessed and outstanding-ack counts are within bounds.

    Polls the consumer's info every ``poll_interval`` seconds over the triggerer's one shared NATS
    connection for ``jetstream_conn_id``. Fires ``{"status": "success", "consumer": {...counts}}``,
    or ``{"status": "error", "reason": ..., "message": ...}`` when the stream or consumer does not
    exist, a request is refused (``Permissions Violation``, or an imported API prefix this account
    has no import for) or the connection cannot be made. While the domain does not answer (a leaf
    that is offline, or a wrong domain name) it keeps polling, up to ``unreachable_timeout``.

    :param jetstream_conn_id: Airflow connection id (the connection is resolved in the triggerer).
    :param stream: stream of the consumer.
    :param consumer: durable or named consumer.
    :param domain: JetStream domain of the stream. Default: the connection's.
    :param api_prefix: JetStream API prefix instead of a domain. Default: the connection's.
    :param max_pending: most unprocessed messages. Default 0.
    :param max_ack_pending: most delivered-but-unacknowledged messages. Default 0.
    :param max_redelivered: most redelivered messages; None (default) does not check.
    :param poll_interval: seconds between checks. Default 5.
    :param unreachable_timeout: how long (seconds, or text like ``"10m"``) the domain may go without
        answering before the trigger fails; None (default): no bound (the sensor's timeout applies).
    :param state: what the sensor's checks so far left (``{"unreachable_since": epoch seconds}``).

    What it opens (its use of the shared connection) is held by ``run()``'s context manager and
    released when ``run()`` returns, is cancelled or is closed: ``cleanup()`` has nothing left to do.
    """

    def __init__(
        self,
        jetstream_conn_id: str,
        stream: str,
        consumer: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        max_pending: int = 0,
        max_ack_pending: int = 0,
        max_redelivered: int | None = None,
        poll_interval: float = 5.0,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.jetstream_conn_id = jetstream_conn_id
        self.stream = stream
        self.consumer = consumer
        self.unreachable_timeout = optional_duration_seconds(unreachable_timeout, "unreachable_timeout")
        self.state = dict(state or {})
        self.domain = domain
        self.api_prefix = api_prefix
        self.max_pending = max_pending
        self.max_ack_pending = max_ack_pending
        self.max_redelivered = max_redelivered
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "jetstream_conn_id": self.jetstream_conn_id,
                "stream": self.stream,
                "consumer": self.consumer,
                "domain": self.domain,
                "api_prefix": self.api_prefix,
                "max_pending": self.max_pending,
                "max_ack_pending": self.max_ack_pending,
                "max_redelivered": self.max_redelivered,
                "poll_interval": self.poll_interval,
                "unreachable_timeout": self.unreachable_timeout,
                "state": self.state,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = JetStreamHook(self.jetstream_conn_id, domain=self.domain, api_prefix=self.api_prefix)
        unanswered = UnreachableClock(self.unreachable_timeout, self.state.get("unreachable_since"))
        try:
            # Held for the trigger's life: every check reuses the triggerer's shared connection.
            async with hook.aconnect():
                clock = PollClock(self.poll_interval)
                while True:
                    try:
                        check = await check_consumer_lag(
                            hook,
                            self.stream,
                            self.consumer,
                            self.max_pending,
                            self.max_ack_pending,
                            self.max_redelivered,
                        )
                    except TRANSIENT_ERRORS as err:
                        what = f"consumer {self.stream!r} > {self.consumer!r}"
                        event = unanswered.on_no_answer(what, transient_reason(hook, err), self.log)
                        if event:
                            yield event
                            return
                    else:
                        unanswered.clear()
                        if check.done:
                            self.log.info(
                                "Consumer %r > %r in %s: %s", self.stream, self.consumer, check.target, check.reason
                            )
                            yield TriggerEvent({"status": "success", "consumer": check.to_xcom()})
                            return
                        self.log.info(
                            "Consumer %r > %r in %s: waiting: %s",
                            self.stream,
                            self.consumer,
                            check.target,
                            check.reason,
                        )
                    await clock.wait()
        except JetStreamNotFoundError as err:
            yield TriggerEvent({"status": "error", "reason": "not_found", "message": str(err)})
        except JetStreamConfigError as err:
            yield TriggerEvent({"status": "error", "reason": "invalid", "message": str(err)})
        except JetStreamPermissionError as err:
            yield TriggerEvent({"status": "error", "reason": "permission", "message": str(err)})
        except JetStreamError as err:
            yield TriggerEvent({"status": "error", "reason": "error", "message": str(err)})
        except nats.errors.ConnectionClosedError:
            message = f"connection {self.jetstream_conn_id!r}: the NATS connection closed (reconnects exhausted)"
            yield TriggerEvent({"status": "error", "reason": "connection_closed", "message": message})
