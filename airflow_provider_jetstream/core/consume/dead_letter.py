"""Dead-lettering: copy a delivery to a dead-letter stream, deduplicated, and wait for its PubAck."""

from __future__ import annotations

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.errors import JetStreamError, JetStreamPublishError
from airflow_provider_jetstream.core.protocol import (
    DLQ_ORIGIN_HEADERS,
    DLQ_REASON_HEADER,
    EXPECTED_STREAM_HEADER,
    MSG_ID_HEADER,
    parse_pub_ack,
)
from airflow_provider_jetstream.core.read.delivery import Delivery
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
    origin = {
        "stream": delivery.stream,
        "domain": delivery.domain or "",
        "consumer": delivery.consumer,
        "subject": delivery.subject,
        "seq": str(delivery.seq),
        "delivered": str(delivery.delivered),
        "timestamp": delivery.timestamp,
    }
    headers.update({DLQ_ORIGIN_HEADERS[key]: value for key, value in origin.items()})
    headers[DLQ_REASON_HEADER] = reason
    headers[MSG_ID_HEADER] = f"{delivery.domain or '_'}/{delivery.stream}/{delivery.seq}"
    headers[EXPECTED_STREAM_HEADER] = dead_letter_stream
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
