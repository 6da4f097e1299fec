"""One delivered message (:class:`Delivery`), made from its frame, with its settles (ack, nak, term, in progress).

A delivery is made from the frame the consumer engine took (:func:`make_delivery`): its subject, the
ack reply's metadata (stream and consumer sequence, deliveries, time, pending) and every value of every
header, read from the frame's own header block: no request per message. A message of a consumer that takes
acks carries an :class:`AckHandle`: each settle goes through the connection's one
:class:`~airflow_provider_jetstream.core.read.settle.Settler` (sent at once, its confirmation awaited in bulk)
or, once that connection is closed, through a connection reopened for it and confirmed before the call
returns.

Airflow-free: Spark executors import it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.protocol import (
    ACK,
    IN_PROGRESS,
    TERM,
    AckReply,
    nak_body,
    parse_header_block,
)
from airflow_provider_jetstream.core.read.settle import AckHandle, Settler, SettleRoute
from airflow_provider_jetstream.core.sync import run_sync


@dataclass(slots=True)
class Delivery:
    """One message as a consumer delivered it (or, for the KV trigger, one revision of a key).

    ``headers`` maps each header name to all of its values, in order; None when the message has none.
    ``timestamp_ns`` is when the stream stored the message (ns since the epoch, UTC); ``seq`` its stream
    sequence; ``delivered`` how many times it was delivered (1 the first time); ``pending`` how many messages
    the consumer had left to deliver after it.

    A message of a durable consumer that takes acks can be settled: ``ack()``, ``nak(delay)``, ``term()`` and
    ``in_progress()`` (``aack()``... from async code), each verdict at most once (:class:`AckHandle`). A settle
    is sent at once and confirmed by the consumer in bulk: before the reading pulls its next batch, before a
    consume iteration or a ``connected()`` block ends, before a connection opened for it closes; a verdict the
    consumer does not confirm (sent again across a failover) raises
    :class:`~airflow_provider_jetstream.core.errors.JetStreamAckError` there, naming the messages. A message
    read without a durable consumer has nothing to settle (``ackable`` False): those raise
    :class:`JetStreamConfigError`.
    """

    stream: str
    consumer: str
    subject: str
    seq: int
    delivered: int
    timestamp_ns: int
    data: bytes
    headers: dict[str, list[str]] | None = None
    domain: str | None = None
    pending: int = 0
    extra: dict[str, Any] | None = None
    handle: AckHandle | None = field(default=None, compare=False, repr=False)

    @property
    def time(self) -> datetime.datetime:
        """When the stream stored the message, as a UTC datetime (microsecond precision)."""
        return datetime.datetime.fromtimestamp(self.timestamp_ns / 1e9, tz=datetime.timezone.utc)

    @property
    def timestamp(self) -> str:
        """``timestamp_ns`` as an ISO-8601 UTC string (microsecond precision)."""
        return self.time.isoformat()

    def header(self, name: str) -> str | None:
        """The last value of header ``name`` (NATS header names are case-sensitive), or None."""
        values = (self.headers or {}).get(name)
        return values[-1] if values else None

    @property
    def ackable(self) -> bool:
        """Whether the message can be settled (delivered by a durable consumer that takes acks)."""
        return self.handle is not None

    @property
    def verdict(self) -> str | None:
        """``ack``, ``nak`` or ``term`` once this process settled it; None before (or when not ackable)."""
        return self.handle.verdict if self.handle is not None else None

    @property
    def confirmed(self) -> bool:
        """Whether the consumer confirmed the verdict sent (False before a verdict, or when not ackable)."""
        return self.handle is not None and self.handle.confirmed

    # -- settling --------------------------------------------------------------------------------

    def _handle(self) -> AckHandle:
        if self.handle is None:
            raise JetStreamConfigError(
                f"message {self.seq} of stream {self.stream!r} was read without a durable consumer that "
                "takes acks: there is nothing to settle (name a consumer with ack_policy explicit or all)"
            )
        return self.handle

    def _claim(self, verdict: str | None) -> AckHandle | None:
        """The handle when this settle may be sent (the verdict recorded), None when the message is settled."""
        handle = self._handle()
        if handle.verdict is not None:
            return None  # settled already: never a second ack (or a nak after an ack)
        if verdict is not None:
            handle.verdict = verdict
        return handle

    async def _asettle(self, verdict: str | None, body: bytes) -> bool:
        handle = self._claim(verdict)
        if handle is None:
            return False
        try:
            route = handle.route
            if route.settler.serves_here():
                await route.settler.send(handle, body)
            else:  # the delivering connection is gone: reach the account again, confirmed before returning
                if route.reopen is None:
                    raise JetStreamConfigError(f"{handle.what}: its connection is closed, and there is no other")
                async with route.reopen() as nc:
                    settler = Settler.of(nc)
                    await settler.send(handle, body)
                    await settler.confirm([handle])
        except BaseException:
            if verdict is not None and not handle.confirmed:
                handle.verdict = None  # not sent: the message may still be settled otherwise
            raise
        return True

    def _settle(self, verdict: str | None, body: bytes) -> bool:
        handle = self._handle()
        settler = handle.route.settler
        if settler.serves_from_another_thread():
            if self._claim(verdict) is None:
                return False
            settler.submit(handle, body)  # the hold's loop sends it now; confirmed in bulk
            return True
        return run_sync(self._asettle(verdict, body))

    async def aack(self) -> bool:
        """Acknowledge the message: processed, never delivered again. False (nothing sent) if it was settled."""
        return await self._asettle("ack", ACK)

    async def anak(self, delay: float | None = None) -> bool:
        """Negative acknowledgement: deliver it again, after ``delay`` seconds (default None: at once, or
        per the consumer's ``backoff``). False (nothing sent) if it was settled."""
        return await self._asettle("nak", nak_body(delay))

    async def aterm(self) -> bool:
        """Terminate it: never delivered again, not processed (dead-letter it first if it must be kept).
        False (nothing sent) if it was settled."""
        return await self._asettle("term", TERM)

    async def ain_progress(self) -> bool:
        """Work in progress: the consumer's ``ack_wait`` starts again. False (nothing sent) once settled."""
        return await self._asettle(None, IN_PROGRESS)

    def ack(self) -> bool:
        """Blocking form of :meth:`aack`: inside a blocking ``consume`` or a ``hook.connected()`` block it is
        sent on that connection at once, and confirmed with the others (see the class doc); elsewhere on a
        connection opened for it."""
        return self._settle("ack", ACK)

    def nak(self, delay: float | None = None) -> bool:
        """Blocking form of :meth:`anak`."""
        return self._settle("nak", nak_body(delay))

    def term(self) -> bool:
        """Blocking form of :meth:`aterm`."""
        return self._settle("term", TERM)

    def in_progress(self) -> bool:
        """Blocking form of :meth:`ain_progress`."""
        return self._settle(None, IN_PROGRESS)


def make_delivery(
    meta: AckReply,
    reply: str,
    subject: bytes,
    headers: bytes,
    payload: bytes,
    stream: str,
    consumer: str,
    domain: str | None,
    route: SettleRoute | None,
) -> Delivery:
    """The :class:`Delivery` of one delivered frame whose ack reply subject ``reply`` says ``meta``, settled through
    ``route`` (None: nothing to settle)."""
    handle = None
    if route is not None:
        handle = AckHandle(reply, route, f"message {meta.sequence} of consumer {consumer!r} on stream {stream!r}")
    return Delivery(
        stream,
        consumer,
        subject.decode(),
        meta.sequence,
        meta.delivered,
        meta.timestamp_ns,
        payload,
        (parse_header_block(headers)[2] or None) if headers else None,
        domain,
        meta.pending,
        None,
        handle,
    )


async def ack_by_reply(api: JetStreamApi, reply: str, what: str) -> None:
    """Acknowledge a message known only by its ack reply subject (the await-message sensor's match, acked once
    Airflow stored it) on ``api``'s connection, confirmed before this returns; ``what`` names it in errors."""
    settler = Settler.of(api.nc)
    handle = AckHandle(reply, SettleRoute(settler, api.prefix, None, api.timeout, api.failover), what)
    handle.verdict = "ack"
    await settler.send(handle, ACK)
    await settler.confirm([handle])
