"""A stream's identity beside every kept sequence: a stream deleted and created again is never read as the old one.

A sequence names a message only within one stream: a stream deleted and created again under the same
name starts again at 1, so a position kept from the old one (the Spark job's checkpoint, a streaming
query's offsets, a replication watch, an event trigger's memory of what it acked) would skip the new
stream's messages up to the old end, or take them for ones already handled. Every position the
provider keeps therefore records the stream's ``created`` time (``STREAM.INFO``'s ``created``, RFC 3339
as the server gives it; compared exactly) with its sequence, and :func:`same_stream` is the one rule
that compares it with the stream's now.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamNotFoundError, StreamRecreatedError

log = logging.getLogger(__name__)

#: The key of the stream's identity in every position the provider keeps as JSON.
IDENTITY_KEY = "created"


def stream_created(info: dict[str, Any] | None) -> str | None:
    """The identity of a stream from its raw ``STREAM.INFO``: its ``created`` time as the server wrote it
    (None when the answer has none)."""
    created = (info or {}).get("created")
    return str(created) if created else None


async def stream_identity(api: JetStreamApi, stream: str) -> str | None:
    """The identity (``created``) of ``stream`` in ``api``'s domain; raises :class:`JetStreamNotFoundError`
    when it does not exist."""
    info = await api.stream_info(stream)
    if info is None:
        raise JetStreamNotFoundError(f"stream {stream!r} does not exist in {api.target}")
    return stream_created(info)


def same_stream(
    stream: str,
    recorded: str | None,
    current: str | None,
    *,
    position: str,
    fail_on_data_loss: bool = True,
    remedy: str = "",
    restart: str = "from the new stream's first sequence (failOnDataLoss=false)",
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> bool:
    """Whether a kept position, recorded on ``stream`` created at ``recorded``, applies to the stream now
    created at ``current``.

    True when both are the same, or either is unknown (a position written by a version that did not
    record the identity is accepted: the caller records ``current`` with its next commit). When they
    differ the stream was deleted and created again: with ``fail_on_data_loss`` (default True) raises
    :class:`StreamRecreatedError` naming the stream, both times and ``remedy`` (how to proceed);
    otherwise logs a warning and returns False: the caller goes on ``restart`` (default: from the new
    stream's first sequence) and records ``current``.

    :param position: what kept the position, in words (``checkpoint stream_to_parquet.ORDERS in bucket b``).
    """
    if recorded is None or current is None or recorded == current:
        return True
    what = (
        f"stream {stream!r} was deleted and created again: {position} was recorded on the stream created at "
        f"{recorded}, and the stream of that name now was created at {current}, so its sequences name other messages"
    )
    if fail_on_data_loss:
        raise StreamRecreatedError(f"{what}." + (f" {remedy}" if remedy else ""))
    logger.warning("%s; going on %s", what, restart)
    return False
