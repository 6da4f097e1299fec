"""Fetching batches: the pull requests of one reading, a declared durable consumer or an ephemeral read.

What ``JetStreamHook.fetch`` / ``consume`` and ``JetStreamConsumeOperator`` build on. A :class:`Reading` keeps one
pull subscription (one inbox) for all its batches: a durable consumer must exist already (it is the DAG's to
declare: never created here) and be a pull consumer; a read without one is an ordered read
(:class:`~airflow_provider_jetstream.core.read.ordered.OrderedConsumer`): a consumer of its own that takes no
acks, made again from the next sequence whenever the read cannot go on, deleted when the reading ends. A batch is
one pull request for up to ``batch_size`` messages that waits up to ``max_wait`` seconds on the server, over at the
status that ends it (its expiry, or nothing left); only that batch is held in memory. Each message of a durable
consumer that takes acks is settled through the connection's one settler
(:class:`~airflow_provider_jetstream.core.read.settle.Settler`): the settles of a batch are confirmed before the
next batch is pulled, and when the reading ends.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

from airflow_provider_jetstream.core.api import JetStreamApi, domain_of
from airflow_provider_jetstream.core.arguments.names import consumer_filters
from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.protocol import AckReply, parse_ack_reply
from airflow_provider_jetstream.core.read.delivery import Delivery, make_delivery
from airflow_provider_jetstream.core.read.ordered import OrderedConsumer
from airflow_provider_jetstream.core.read.pull import PullRequests, PullSubscription
from airflow_provider_jetstream.core.read.settle import AckHandle, Reopen, Settler, SettleRoute
from airflow_provider_jetstream.core.resend import retry_failover

#: Seconds past a request's ``max_wait`` its ending status may take to arrive before the batch counts as over.
STATUS_GRACE = 2.0
#: One request at a time; each batch sets its own wait (``expires``) and ``no_wait`` before it asks.
_REQUESTS = PullRequests(expires=5.0, heartbeat=None, pipelined=False)


class ReadingConsumer(NamedTuple):
    """The consumer a read pulls: its name, whether it takes acks, and (durable) its ``ack_wait`` seconds."""

    name: str
    ackable: bool
    ack_wait: float | None = None


async def durable_consumer(
    api: JetStreamApi, stream: str, consumer: str, filter_subjects: Sequence[str] = ()
) -> ReadingConsumer:
    """The declared durable pull consumer ``consumer`` of ``stream``, checked: it exists (it is never created
    here), is pulled (no ``deliver_subject``) and, if ``filter_subjects`` are given, filters exactly those.

    :class:`JetStreamNotFoundError` when it (or the stream) does not exist; :class:`JetStreamConfigError`
    when it is a push consumer or filters other subjects.
    """
    where = f"consumer {consumer!r} on stream {stream!r} in {api.target}"
    info = await api.consumer_info(stream, consumer)
    if info is None:
        raise JetStreamNotFoundError(
            f"{where} does not exist: declare it first (JetStreamCreateConsumerOperator or the hook's "
            "ensure_consumer); a fetch never creates a durable consumer"
        )
    config = info.get("config") or {}
    if config.get("deliver_subject"):
        raise JetStreamConfigError(f"{where} is a push consumer: fetch needs a pull consumer (no deliver_subject)")
    filters = consumer_filters(config)
    if filter_subjects and sorted(filters) != sorted(filter_subjects):
        raise JetStreamConfigError(
            f"{where} filters {filters or 'every subject'}, not {', '.join(map(repr, filter_subjects))}: a durable "
            "consumer delivers what its own filter says; leave filter_subjects out, or read without a consumer"
        )
    ackable = config.get("ack_policy", "none") != "none"
    ack_wait = config.get("ack_wait")
    return ReadingConsumer(consumer, ackable, ack_wait / 1e9 if ack_wait else None)


class Reading:
    """The batches of one read of ``stream`` in ``api``'s domain (see the module doc): :meth:`open` it, take
    :meth:`batch` es, :meth:`close` it (its settles confirmed, an ephemeral consumer deleted).

    :param consumer: a declared durable pull consumer; None: an ordered read of the reading's own from
        ``start_seq`` (default 1) or ``start_time``, only ``filter_subjects`` if given.
    :param reopen: how a message's settle reaches the account once this reading's connection is closed (the
        hook's ``aconnect``). Default None: it cannot.
    """

    def __init__(
        self,
        api: JetStreamApi,
        stream: str,
        consumer: str | None,
        *,
        filter_subjects: Sequence[str] = (),
        start_seq: int | None = None,
        start_time: str | dt.datetime | None = None,
        reopen: Reopen | None = None,
    ) -> None:
        if consumer is not None and (start_seq is not None or start_time is not None):
            raise JetStreamConfigError(
                f"start_seq / start_time with consumer {consumer!r}: a durable consumer resumes where its acks "
                "left it; its start is part of its declaration"
            )
        self.api, self.stream, self.filter_subjects = api, stream, list(filter_subjects)
        self.start_seq, self.start_time, self.reopen = start_seq, start_time, reopen
        self.consumer: ReadingConsumer = ReadingConsumer(consumer or "", False)
        self.domain = domain_of(api.prefix)
        self.settler = Settler.of(api.nc)
        self.route: SettleRoute | None = None
        self.ordered: OrderedConsumer | None = None
        self.sub: PullSubscription | None = None
        self.next_seq = start_seq or 1  # an ordered read's next stream sequence
        self._durable = consumer
        self._taken: dict[int, Delivery] = {}
        self._want = 0
        self._sent: list[AckHandle] = []  # settles of the last batch, confirmed before the next one

    @property
    def where(self) -> str:
        return f"consumer {self.consumer.name!r} on stream {self.stream!r} in {self.api.target}"

    async def open(self) -> Reading:
        """Check the durable consumer (or make the ordered one) and listen on a fresh inbox."""
        if self._durable is not None:
            self.consumer = await durable_consumer(self.api, self.stream, self._durable, self.filter_subjects)
            if self.consumer.ackable:
                self.route = SettleRoute(
                    self.settler, self.api.prefix, self.reopen, self.api.timeout, self.api.failover
                )
            self.sub = await PullSubscription(
                self.api, self.stream, self.consumer.name, self._on_frame, _REQUESTS
            ).open()
            return self
        self.ordered = OrderedConsumer(
            self.api, self.stream, self._on_ordered, _REQUESTS, filter_subjects=self.filter_subjects, kind="fetch"
        )
        await self.ordered.start(start_seq=self.start_seq, start_time=self.start_time)
        self.sub = self.ordered.sub
        self.consumer = ReadingConsumer(self.ordered.consumer or "", False)
        return self

    async def close(self) -> None:
        """Confirm the settles sent, stop listening, delete an ordered read's consumer."""
        try:
            await self.confirm()
        finally:
            if self.ordered is not None:
                await asyncio.shield(self.ordered.stop())
            elif self.sub is not None:
                await self.sub.close()

    async def confirm(self) -> None:
        """Wait until the consumer confirmed the settles of the batches handed out so far."""
        handles, self._sent = self._sent, []
        if handles:
            await self.settler.confirm(set(handles))

    # -- frames ------------------------------------------------------------------------------------

    def _on_frame(self, subject: bytes, reply: bytes, headers: bytes, payload: bytes) -> None:
        reply_text = reply.decode()
        meta = parse_ack_reply(reply_text)
        if meta is not None:
            self._take(meta, reply_text, subject, headers, payload)

    def _on_ordered(self, meta: AckReply, reply: str, subject: bytes, headers: bytes, payload: bytes) -> None:
        self.next_seq = meta.sequence + 1
        self._take(meta, reply, subject, headers, payload)

    def _take(self, meta: AckReply, reply: str, subject: bytes, headers: bytes, payload: bytes) -> None:
        # Delivered twice (held past its ack_wait): the newest reply acks it.
        self._taken[meta.sequence] = make_delivery(
            meta, reply, subject, headers, payload, self.stream, self.consumer.name, self.domain, self.route
        )
        if len(self._taken) >= self._want and self.sub is not None:
            self.sub.changed.set()

    # -- batches -----------------------------------------------------------------------------------

    async def batch(self, batch_size: int, max_wait: float, *, no_wait: bool = False) -> list[Delivery]:
        """One pull request for up to ``batch_size`` messages that waits up to ``max_wait`` seconds for them (at
        most half the consumer's ``ack_wait``, so none is due again before it is handed out): the messages, in
        delivery order, each sequence once, once the request is over (full, expired, or nothing left). With
        ``no_wait`` the request takes the messages there are now and is over at once. The settles of the
        previous batch are confirmed first.

        A pull a clustered JetStream answers "no leader" (503) before any message, as a node leading the
        consumer dies, is sent again after the election (the one retry rule,
        :func:`~airflow_provider_jetstream.core.resend.retry_failover`, within the API's ``failover`` seconds);
        an ordered read goes on with a new consumer. Raises :class:`JetStreamDomainUnavailableError` when no
        JetStream answered the pull, :class:`JetStreamNotFoundError` when the durable consumer was deleted, and
        :class:`~airflow_provider_jetstream.core.errors.JetStreamError` when the server refused it.
        """
        if batch_size < 1:
            raise JetStreamConfigError(f"batch_size={batch_size} must be >= 1")
        await self.confirm()
        if self.consumer.ackable and self.consumer.ack_wait:
            # Held past its ack_wait, a message is delivered again, to this very request if it still waits.
            max_wait = min(max_wait, self.consumer.ack_wait / 2)
        self._taken = {}
        self._want = batch_size
        await retry_failover(
            lambda: self._pull(batch_size, max_wait, no_wait),
            self.api.nc,
            within=self.api.failover,
            what=self.where,
            prefix=self.api.prefix,
        )
        taken, self._taken = self._taken, {}
        self._sent = [d.handle for d in taken.values() if d.handle is not None]
        return list(taken.values())

    async def _pull(self, batch_size: int, max_wait: float, no_wait: bool) -> None:
        """One pull request; returns once it is over (its messages in ``_taken``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait + STATUS_GRACE
        asked = False
        while len(self._taken) < batch_size:
            sub = self.sub
            if self.ordered is not None:
                reason = self.ordered.interruption()
                if reason is not None:
                    if self._taken:
                        return  # what came is the batch: the next one goes on with a new consumer
                    await self.ordered.resume(self.next_seq, reason)
                    self.sub = self.ordered.sub
                    asked = False
                    continue
            if sub is None:
                return
            if not asked:
                sub.expires, sub.no_wait = max_wait, no_wait
                sub.request_over = False
                await sub.ask(batch_size - len(self._taken))
                asked = True
            if sub.failure is not None:
                raise sub.failure
            if sub.request_over:
                return
            if self.ordered is None and (sub.gone is not None or sub.interrupted is not None):
                await self._interrupted(sub)
                return
            left = deadline - loop.time()
            if left <= 0 or not await sub.wait(left):
                return  # the request's end was not heard: what came is the batch

    async def _interrupted(self, sub: PullSubscription) -> None:
        """A durable consumer's pull was interrupted: a deleted consumer fails (unless a failover's status: it
        is still there); nothing could serve the pull: what came is the batch, or, when nothing did, no
        JetStream answered (asked again across a failover)."""
        gone, status = sub.gone, sub.gone or sub.interrupted
        sub.clear()
        if gone is not None and await self.api.consumer_info(self.stream, self.consumer.name) is None:
            raise JetStreamNotFoundError(f"{self.where} was deleted while it was pulled")
        if not self._taken and status is not None:
            raise JetStreamDomainUnavailableError(f"{self.where}: the pull was answered {status.reason}")
