"""Dead-lettering: copy a delivery to a dead-letter stream, deduplicated, and wait for its PubAck."""

from __future__ import annotations

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.consume.deliveries import Delivery
from airflow_provider_jetstream.core.errors import JetStreamError, JetStreamPublishError
from airflow_provider_jetstream.core.protocol import parse_pub_ack
from airflow_provider_jetstream.core.tasks import wait_task


async def dead_letter(
    nc: Client,
    delivery: Delivery,
    *,
    dead_letter_stream: str,
    subject: str,
    reason: str,
    timeout: float = 5.0,
) -> int:
    """Copy ``delivery`` to ``dead_letter_stream`` on ``subject`` and wait for its PubAck; return its sequence there.

    The copy keeps the original headers (the last value of repeated ones) and adds ``Airflow-DLQ-Reason``
    and the origin (``Airflow-DLQ-Stream``, ``-Domain``, ``-Consumer``, ``-Subject``, ``-Sequence``,
    ``-Delivered``, ``-Timestamp``). ``Nats-Msg-Id`` is ``<domain>/<stream>/<sequence>``, so copying
    the same message again after a crash is deduplicated by the dead-letter stream. Raises
    ``JetStreamError`` when the stream did not store it.
    """
    headers = {k: v[-1] for k, v in (delivery.headers or {}).items() if v}
    headers.update(
        {
            "Airflow-DLQ-Reason": reason,
            "Airflow-DLQ-Stream": delivery.stream,
            "Airflow-DLQ-Domain": delivery.domain or "",
            "Airflow-DLQ-Consumer": delivery.consumer,
            "Airflow-DLQ-Subject": delivery.subject,
            "Airflow-DLQ-Sequence": str(delivery.sequence),
            "Airflow-DLQ-Delivered": str(delivery.delivered),
            "Airflow-DLQ-Timestamp": delivery.timestamp,
            "Nats-Msg-Id": f"{delivery.domain or '_'}/{delivery.stream}/{delivery.sequence}",
            "Nats-Expected-Stream": dead_letter_stream,
        }
    )
    try:
        answer = await wait_task(nc.request(subject, delivery.data, timeout=timeout, headers=headers))
    except nats.errors.NoRespondersError:
        raise JetStreamError(f"no stream stores {subject!r}: is {dead_letter_stream!r} missing?") from None
    except nats.errors.TimeoutError:
        raise JetStreamError(f"{dead_letter_stream!r} did not confirm {subject!r} within {timeout}s") from None
    try:
        return parse_pub_ack(answer.data).seq
    except JetStreamPublishError as err:
        raise JetStreamError(f"dead-letter stream {dead_letter_stream!r} refused the copy: {err.description}") from None
