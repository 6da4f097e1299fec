"""``JetStreamConsumerLagSensor``: wait until a consumer has processed and acknowledged its messages."""

from __future__ import annotations

from typing import Any

from airflow_provider_jetstream.core.arguments import Args
from airflow_provider_jetstream.core.signatures.operations import CONSUMER_LAG
from airflow_provider_jetstream.core.signatures.waits import SENSOR
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.sensors.base import BaseJetStreamSensor
from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger


class JetStreamConsumerLagSensor(BaseJetStreamSensor):
    """Wait until a consumer has processed and acknowledged its messages.

    Succeeds when the consumer's messages not delivered yet (``num_pending``) are at most ``max_unprocessed``,
    its messages delivered and not acknowledged (``num_ack_pending``) at most ``max_outstanding_acks`` and, if
    given, its
    redelivered count at most ``max_redelivered``: the nats CLI's ``nats server check consumer
    --unprocessed-critical --outstanding-ack-critical``. Returns (XCom) the consumer's counts and
    its ``delivered`` and ``ack_floor`` sequences, and on a cluster the consumer's leader and replica
    health (``cluster``). A stream or consumer that does not exist fails
    the task at once.

    :param stream: stream of the consumer (templated).
    :param consumer: durable or named consumer (templated).
    :param max_unprocessed: most messages not delivered yet. Default 0.
    :param max_outstanding_acks: most messages delivered and not acknowledged. Default 0.
    :param max_redelivered: most redelivered messages; None (default) does not check.

    Also takes :class:`BaseJetStreamSensor`'s ``jetstream_conn_id``, ``domain``, ``api_prefix``,
    ``deferrable``, ``unreachable_timeout`` and Airflow's sensor arguments (``poke_interval``, ``timeout``, ``mode``,
    ``soft_fail``...).
    """

    hook_class = JetStreamStatusHook
    arguments: Args = SENSOR + CONSUMER_LAG
    event_key = "consumer"

    def __init__(
        self,
        *,
        stream: str,
        consumer: str,
        max_unprocessed: int = 0,
        max_outstanding_acks: int = 0,
        max_redelivered: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream = stream
        self.consumer = consumer
        self.max_unprocessed = max_unprocessed
        self.max_outstanding_acks = max_outstanding_acks
        self.max_redelivered = max_redelivered

    def trigger(self) -> JetStreamConsumerLagTrigger:
        return JetStreamConsumerLagTrigger(
            **self.trigger_arguments(JetStreamConsumerLagTrigger),
            poll_interval=self.poke_interval,
            state=dict(self._state),
        )
