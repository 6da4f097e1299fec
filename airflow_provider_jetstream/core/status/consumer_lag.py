"""The consumer-lag check: unprocessed messages and outstanding acks within bounds, as ``nats server check consumer``.

A consumer is done when its unprocessed messages (``num_pending``) and outstanding acks
(``num_ack_pending``), and optionally its redeliveries, are within bounds. Read through
:class:`~airflow_provider_jetstream.core.api.JetStreamApi`; connecting and choosing the domain is the
caller's (:class:`airflow_provider_jetstream.hooks.jetstream.JetStreamHook`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamNotFoundError
from airflow_provider_jetstream.core.manage.cluster import cluster_health


@dataclass(frozen=True)
class ConsumerLagCheck:
    """One reading of a consumer's counts and whether they are within the thresholds.

    :param done: every count within its bound.
    :param reason: the counts against their bounds, or which is over, in words.
    :param info: the server's raw consumer info.
    """

    stream: str
    consumer: str
    target: str
    info: dict[str, Any]
    done: bool
    reason: str

    @property
    def cluster(self) -> dict[str, Any] | None:
        """The consumer's leader and replica health on a cluster (see
        :func:`~airflow_provider_jetstream.core.manage.cluster.cluster_health`); None on a single server."""
        return cluster_health(self.info.get("cluster"))

    def describe(self) -> str:
        """The reason, and on a cluster the consumer's leader and replicas: the sensor's log line."""
        return self.reason + (f"; cluster: {self.cluster['summary']}" if self.cluster else "")

    def to_xcom(self) -> dict[str, Any]:
        """The consumer's counts and its delivered and ack-floor sequences; ``cluster`` on a cluster."""
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
            **({"cluster": self.cluster} if self.cluster else {}),
        }


def judge_consumer(
    info: dict[str, Any], max_unprocessed: int, max_outstanding_acks: int, max_redelivered: int | None
) -> tuple[bool, str]:
    """``(done, reason)`` for a raw consumer info: every count within its bound, or which is not."""
    counts = [
        ("unprocessed (num_pending)", info.get("num_pending", 0), max_unprocessed, "max_unprocessed"),
        (
            "outstanding acks (num_ack_pending)",
            info.get("num_ack_pending", 0),
            max_outstanding_acks,
            "max_outstanding_acks",
        ),
    ]
    if max_redelivered is not None:
        counts.append(
            ("redelivered (num_redelivered)", info.get("num_redelivered", 0), max_redelivered, "max_redelivered")
        )
    over = [f"{what} {value} > {name} {bound}" for what, value, bound, name in counts if value > bound]
    if over:
        return False, "; ".join(over)
    return True, ", ".join(f"{what} {value} <= {bound}" for what, value, bound, _ in counts)


async def existing_consumer(api: JetStreamApi, stream: str, consumer: str) -> dict[str, Any]:
    """The consumer's raw info; :class:`JetStreamNotFoundError` when the stream or the consumer does not exist."""
    info = await api.consumer_info(stream, consumer)  # a missing stream raises JetStreamNotFoundError
    if info is None:
        raise JetStreamNotFoundError(f"consumer {consumer!r} does not exist on stream {stream!r} in {api.target}")
    return info


async def check_consumer_lag(
    api: JetStreamApi,
    stream: str,
    consumer: str,
    max_unprocessed: int = 0,
    max_outstanding_acks: int = 0,
    max_redelivered: int | None = None,
) -> ConsumerLagCheck:
    """Read a consumer's info through ``api`` and judge it against the thresholds.

    Raises :class:`JetStreamNotFoundError` when the stream or the consumer does not exist, and
    :class:`JetStreamDomainUnavailableError` when no JetStream answers at ``api``'s target.
    """
    info = await existing_consumer(api, stream, consumer)
    done, reason = judge_consumer(info, max_unprocessed, max_outstanding_acks, max_redelivered)
    return ConsumerLagCheck(stream, consumer, api.target, info, done, reason)
