"""``JetStreamConsumerLagTrigger``: polls :meth:`JetStreamStatusHook.aconsumer_lag` until a consumer is within bounds.

The check (shared with the sensor's poke and the hook) is
:func:`airflow_provider_jetstream.core.status.consumer_lag.check_consumer_lag`: the nats CLI's ``nats server check
consumer --unprocessed-critical --outstanding-ack-critical``.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.signatures.waits import CONSUMER_LAG_TRIGGER
from airflow_provider_jetstream.core.status.consumer_lag import ConsumerLagCheck
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.triggers.base import JetStreamWaitTrigger, keeps_arguments


class JetStreamConsumerLagTrigger(JetStreamWaitTrigger):
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
    :param max_unprocessed: most messages not delivered yet. Default 0.
    :param max_outstanding_acks: most messages delivered and not acknowledged. Default 0.
    :param max_redelivered: most redelivered messages; None (default) does not check.
    :param poll_interval: seconds between checks. Default 5.
    """

    arguments = CONSUMER_LAG_TRIGGER
    hook_class = JetStreamStatusHook
    event_key = "consumer"
    what_format = "consumer {stream!r} > {consumer!r}"

    @keeps_arguments
    def __init__(
        self,
        jetstream_conn_id: str,
        stream: str,
        consumer: str,
        domain: str | None = None,
        api_prefix: str | None = None,
        max_unprocessed: int = 0,
        max_outstanding_acks: int = 0,
        max_redelivered: int | None = None,
        poll_interval: float = 5.0,
        unreachable_timeout: float | str | None = None,
        state: dict[str, Any] | None = None,
    ) -> None: ...

    async def check(self, hook: JetStreamStatusHook) -> ConsumerLagCheck:
        check = await hook.aconsumer_lag(
            self.stream,
            self.consumer,
            max_unprocessed=self.max_unprocessed,
            max_outstanding_acks=self.max_outstanding_acks,
            max_redelivered=self.max_redelivered,
        )
        state = "done" if check.done else "waiting"
        self.log.info(
            "Consumer %r > %r in %s: %s: %s", self.stream, self.consumer, check.target, state, check.describe()
        )
        return check
