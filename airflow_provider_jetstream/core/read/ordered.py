"""Ordered reading: an ephemeral consumer of the reader's own, made again from the next sequence whenever the
reading cannot go on as it is (nats.go's ordered consumer, on the pull engine).

Exact ranges, ephemeral fetches and consumes, and the KV and object watches read this way. The consumer
takes no acks and lives in memory; the reader deletes it at the end (the server deletes it anyway once nobody
pulls it). :class:`OrderedConsumer` keeps the order: a delivery whose consumer sequence is not the next one
(a message lost on the way, a reconnect) marks the reading broken, as does a heartbeat saying more was
delivered than arrived; the reader then :meth:`~OrderedConsumer.resume` s from the next stream sequence it
needs, with a new consumer and a fresh inbox (late frames of the old one are dropped). It resumes too when the
server says the consumer is gone or nothing can serve the pull now (after the subscription's pause), and
when requests stall. It counts the resumes in a row, and gives up after
``max_resumes`` of them, except on a cluster's connection while a failover may last (the API's ``failover``
seconds): a stream leader killed with the reader's consumer on it is made again once a new leader is elected.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi, hint_for, no_leader_error
from airflow_provider_jetstream.core.connection.client import clustered, in_home_domain
from airflow_provider_jetstream.core.errors import JetStreamDomainUnavailableError, JetStreamError
from airflow_provider_jetstream.core.protocol import AckReply, parse_ack_reply
from airflow_provider_jetstream.core.read.pull import (
    EphemeralConsumer,
    PullRequests,
    PullSubscription,
    create_ephemeral_consumer,
    discard_consumer,
)
from airflow_provider_jetstream.core.resend import during_failover, pull_pauses

#: ``on_message(meta, reply, subject, headers, payload)``: one delivery in order (``reply`` decoded).
OrderedMessage = Callable[[AckReply, str, bytes, bytes, bytes], None]


class OrderedConsumer:
    """The ephemeral consumer a reader reads in order (see the module doc).

    :param api: the JetStream API of the stream's domain or prefix.
    :param stream: stream name.
    :param on_message: called with each delivery in order (not with one that broke the order).
    :param requests: how each consumer's pull requests are made (:class:`PullRequests`; a ``max_bytes`` a
        larger message dropped stays dropped for the next consumer).
    :param where: the stream in words, for errors. Default: ``stream '<stream>' in <the API's target>``.
    :param filter_subjects: only these subjects. Default: all.
    :param inactive_threshold: seconds after which the server deletes the consumer nobody pulls. Default 120.
    :param max_resumes: resumes in a row before giving up (more while a failover may last). Default 3.
    :param kind: the consumer name's prefix (``read_``, ``watch_``...). Default ``read``.
    :param check_order: check each delivery's consumer sequence (False: the reader takes the frames in bulk
        itself and keeps the order by stream sequence). Default True.
    :param changed: the reader's wake-up event (see :class:`PullSubscription`). Default: a new one.
    :param on_idle: called when a heartbeat says the consumer has nothing to deliver (see
        :class:`PullSubscription`). Default None.
    """

    def __init__(
        self,
        api: JetStreamApi,
        stream: str,
        on_message: OrderedMessage,
        requests: PullRequests,
        *,
        where: str | None = None,
        filter_subjects: Sequence[str] = (),
        inactive_threshold: float = 120.0,
        max_resumes: int = 3,
        kind: str = "read",
        check_order: bool = True,
        changed: asyncio.Event | None = None,
        on_idle: Callable[[int], None] | None = None,
    ) -> None:
        self.api, self.stream, self.where = api, stream, where or f"stream {stream!r} in {api.target}"
        self.on_message, self.requests = on_message, requests
        self.filter_subjects = list(filter_subjects)
        self._stream_config: Mapping[str, Any] | None = None
        self.inactive_threshold, self.max_resumes, self.kind = inactive_threshold, max_resumes, kind
        self.check_order = check_order
        self.changed = changed or asyncio.Event()
        self.on_idle = on_idle
        self.sub: PullSubscription | None = None
        #: The consumer sequence of the last delivery taken (0: none yet).
        self.consumer_seq = 0
        #: Why the order broke (None: it holds).
        self.broken: str | None = None
        self._resumes = 0
        self._streak_since = 0.0
        self._pause = pull_pauses(max(1.0, 3 * (requests.heartbeat or requests.expires)))

    @property
    def consumer(self) -> str | None:
        return self.sub.consumer if self.sub is not None else None

    async def start(
        self,
        *,
        start_seq: int | None = None,
        start_time: str | dt.datetime | None = None,
        last_per_subject: bool = False,
    ) -> EphemeralConsumer:
        """Make the consumer (from ``start_seq``, default 1, or ``start_time``, or the last message of each
        subject) and listen on a fresh inbox; what the server said of it (its pending messages...)."""
        made = await create_ephemeral_consumer(
            self.api,
            self.stream,
            where=self.where,
            start_seq=start_seq,
            start_time=start_time,
            last_per_subject=last_per_subject,
            filter_subjects=self.filter_subjects,
            stream_config=self._stream_config,
            inactive_threshold=self.inactive_threshold,
            kind=self.kind,
        )
        self._stream_config = made.stream_config  # its filter is checked once
        self.sub = await PullSubscription(
            self.api, self.stream, made.name, self._on_frame, self.requests, changed=self.changed, on_idle=self.on_idle
        ).open()
        self.consumer_seq, self.broken = 0, None
        return made

    def _on_frame(self, subject: bytes, reply: bytes, headers: bytes, payload: bytes) -> None:
        if self.broken is not None:
            return
        reply_text = reply.decode()
        meta = parse_ack_reply(reply_text)
        if meta is None or meta.consumer != self.consumer:
            return
        if self.check_order and meta.consumer_sequence != self.consumer_seq + 1:
            self.broken = f"consumer sequence {meta.consumer_sequence} came after {self.consumer_seq}"
            self.changed.set()
            return
        self.consumer_seq = meta.consumer_sequence
        self.on_message(meta, reply_text, subject, headers, payload)

    def interruption(self) -> str | None:
        """Why the reading cannot go on with this consumer (a resume is due), or None: the order broke, a
        heartbeat says more was delivered than arrived, the consumer is gone, "retry after" (once its pause
        is over), requests stalled. A refused request raises (the same request would be refused again)."""
        sub = self.sub
        if self.broken is not None:
            return self.broken
        if sub is None:
            return None
        if sub.failure is not None:
            raise sub.failure
        if self.check_order and sub.last_consumer_seq is not None and sub.last_consumer_seq > self.consumer_seq:
            return f"the consumer delivered up to {sub.last_consumer_seq}, {self.consumer_seq} arrived"
        if sub.gone is not None or (sub.interrupted is not None and not sub.paused()):
            return f"the server answered {(sub.gone or sub.interrupted).reason}"  # type: ignore[union-attr]
        if sub.stalled():
            return f"no message or heartbeat for {sub.silence():.0f}s"
        return None

    def flowing(self) -> None:
        """Data flows: the resumes in a row start over."""
        self._resumes = 0
        self._pause.reset()
        if self.sub is not None:
            self.sub.flowing()

    async def resume(self, next_seq: int | None, reason: str) -> EphemeralConsumer | None:
        """A new consumer from ``next_seq`` (None: from the last message of each subject again; the old one
        deleted): the ``reason``'s resume, counted in a row;
        gives up (raises) after ``max_resumes`` of them, except while a failover may last. None when the
        consumer could not be made yet (a failover: :meth:`interruption` says so until a resume works)."""
        if self._resumes == 0:
            self._streak_since = time.monotonic()
        if self._resumes >= self.max_resumes and not self._failing_over():
            raise self._given_up(reason)
        self._resumes += 1
        if self.sub is None and self.broken is not None:
            await asyncio.sleep(self._pause.next())  # the last resume could not make the consumer: an election
        await self.stop()
        try:
            return await self.start(start_seq=next_seq, last_per_subject=next_seq is None)
        except Exception as err:
            if not during_failover(err, self.api.nc, self.api.prefix) or not self._failing_over():
                raise
            self.broken = f"the consumer could not be made again: {err}"  # a new leader is being elected
            return None

    def _failing_over(self) -> bool:
        return clustered(self.api.nc) and time.monotonic() - self._streak_since < self.api.failover

    def _given_up(self, reason: str) -> BaseException:
        """The error of a reading that resumed too often in a row, naming the likely cause."""
        nc, prefix = self.api.nc, self.api.prefix
        sub = self.sub
        if sub is not None and sub.no_responders():
            if clustered(nc) and in_home_domain(nc, prefix):  # the cluster's own streams
                return no_leader_error(self.api.target, self.stream, f": the read of {self.where} stopped")
            hint = hint_for(nc, prefix) if clustered(nc) else "is the domain connected?"
            return JetStreamDomainUnavailableError(f"no JetStream responded for {self.where}: {hint}")
        hint = hint_for(nc, prefix) if clustered(nc) else "is the domain still connected?"
        return JetStreamError(f"{self.where}: {reason}, {self._resumes + 1} times in a row: {hint}")

    async def stop(self) -> None:
        """Stop listening and delete the consumer (best effort)."""
        sub, self.sub = self.sub, None
        if sub is not None:
            # max_bytes dropped for a message larger than it: for the next consumer too
            self.requests = replace(self.requests, max_bytes=sub.max_bytes)
            await sub.close()
            await asyncio.shield(discard_consumer(self.api, self.stream, sub.consumer))
