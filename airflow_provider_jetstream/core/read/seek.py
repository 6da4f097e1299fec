"""Where a time falls in a stream, as the server answers it (Spark's ``startingTime`` and ``endingTime``).

A stream stamps each message when it stores it (a mirror keeps its origin's stamps), so its timestamps
rise with its sequences: a time splits the stream into the sequences stored before it and those
stored at or after it. The server finds the split: a consumer of this call's own that delivers by start
time starts at the first message stored at or after the time (or, when there is none yet, at the
next sequence to be stored), and its create answer names the sequence it starts after.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.read.pull import create_ephemeral_consumer, discard_consumer


@dataclass(frozen=True)
class TimeBoundary:
    """Where a time falls in a stream when the server was asked.

    ``before``: every stream sequence up to it was stored before the time (or is no longer stored); the
    next one, ``before + 1``, is the first stored at or after it. ``reached``: the stream holds a message
    stored at or after the time, so no message stored before it can be added later (its sequence would be
    higher, its timestamp too). Not reached, ``before`` is the stream's last sequence when asked.
    """

    before: int
    reached: bool

    @property
    def first_at(self) -> int:
        """The first sequence stored at or after the time (or to be stored, when not reached)."""
        return self.before + 1


async def time_boundary(
    nc: Client,
    stream: str,
    when_iso: str,
    *,
    api_prefix: str = "$JS.API",
    timeout: float = 10.0,
) -> TimeBoundary:
    """Where ``when_iso`` (RFC 3339) falls in ``stream``: see :class:`TimeBoundary`.

    The split counts every subject (a filtered read starts or ends at the same sequence: its reader
    skips the other subjects). The server compares at nanoseconds.
    """
    api = JetStreamApi(nc, api_prefix, timeout=timeout)
    where = f"stream {stream!r} in {describe_prefix(api_prefix)}"
    consumer = await create_ephemeral_consumer(
        api, stream, where=where, start_time=when_iso, inactive_threshold=30.0, kind="seek"
    )
    await discard_consumer(api, stream, consumer.name)
    return TimeBoundary(before=consumer.after, reached=consumer.pending > 0)
