"""Fetching batches: one pull request of a consumer, its messages as settleable deliveries; reading consumers.

What ``JetStreamHook.fetch`` / ``consume`` and ``JetStreamConsumeOperator`` build on. A batch is one pull
request on the one pull engine (:class:`~airflow_provider_jetstream.core.read.pull.PullRequests`): it asks
for ``batch`` messages that wait up to ``max_wait`` seconds on the server, and is over at the server's
status that ends it (its expiry, or no messages); only that one batch is held in memory. A durable consumer
must exist already (it is the DAG's to declare: never created here) and be a pull consumer; a read without
one uses an ephemeral consumer that takes no acks, deleted when the read ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import nats.errors
from nats.aio.msg import Msg

from airflow_provider_jetstream.core.api import JetStreamApi, domain_of, retry_failover
from airflow_provider_jetstream.core.consume.deliveries import AckHandle, Delivery, Send, send_settle
from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.protocol import (
    FATAL,
    HEARTBEAT,
    REQUEST_DONE,
    RESUME,
    AckReply,
    headers_from_api,
    parse_ack_reply,
)
from airflow_provider_jetstream.core.read.pull import PullRequests, create_ephemeral_consumer, discard_consumer
from airflow_provider_jetstream.core.tasks import next_item

log = logging.getLogger(__name__)

#: Seconds past a request's ``max_wait`` its ending status may take to arrive before the batch counts as over.
STATUS_GRACE = 2.0


class ReadingConsumer(NamedTuple):
    """The consumer a read pulls: its name, whether it takes acks, and (durable) its ``ack_wait`` seconds."""

    name: str
    ackable: bool
    ack_wait: float | None = None


async def stored_headers(api: JetStreamApi, stream: str, sequence: int) -> dict[str, list[str]] | None:
    """Every value of each header of the stream's message ``sequence`` (nats-py keeps the last one only),
    read with ``STREAM.MSG.GET``; None when it cannot be read (the caller keeps the last values)."""
    try:
        stored = await api.msg(stream, sequence)
    except (JetStreamError, nats.errors.Error) as err:
        log.warning("%s: cannot read repeated header values (%s); keeping the last value of each", stream, err)
        return None
    return headers_from_api(stored) if stored else None


def _filters(config: dict[str, Any]) -> list[str]:
    if config.get("filter_subject"):
        return [config["filter_subject"]]
    return list(config.get("filter_subjects") or [])


async def durable_consumer(
    api: JetStreamApi, stream: str, consumer: str, filter_subject: str | None
) -> ReadingConsumer:
    """The declared durable pull consumer ``consumer`` of ``stream``, checked: it exists (it is never created
    here), is pulled (no ``deliver_subject``) and, if ``filter_subject`` is given, filters exactly that.

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
    filters = _filters(config)
    if filter_subject is not None and filters != [filter_subject]:
        raise JetStreamConfigError(
            f"{where} filters {filters or 'every subject'}, not {filter_subject!r}: a durable consumer delivers "
            "what its own filter says; leave filter_subject out, or read without a consumer"
        )
    ackable = config.get("ack_policy", "none") != "none"
    ack_wait = config.get("ack_wait")
    return ReadingConsumer(consumer, ackable, ack_wait / 1e9 if ack_wait else None)


@contextlib.asynccontextmanager
async def reading_consumer(
    api: JetStreamApi,
    stream: str,
    consumer: str | None,
    *,
    filter_subject: str | None = None,
    start_seq: int | None = None,
    start_time: str | dt.datetime | None = None,
) -> AsyncIterator[ReadingConsumer]:
    """The consumer a read pulls: the durable ``consumer`` (checked by :func:`durable_consumer`), or with
    ``consumer`` None an ephemeral one of this read (from ``start_seq``, default 1, or ``start_time``; only
    ``filter_subject`` if given; no acks), deleted when the block ends."""
    if consumer is not None:
        if start_seq is not None or start_time is not None:
            raise JetStreamConfigError(
                f"start_seq / start_time with consumer {consumer!r}: a durable consumer resumes where its acks "
                "left it; its start is part of its declaration"
            )
        yield await durable_consumer(api, stream, consumer, filter_subject)
        return
    name, *_ = await create_ephemeral_consumer(
        api,
        stream,
        where=f"stream {stream!r} in {api.target}",
        start_seq=start_seq,
        start_time=start_time,
        filter_subjects=[filter_subject] if filter_subject else (),
        kind="fetch",
    )
    try:
        yield ReadingConsumer(name, False)
    finally:
        await asyncio.shield(discard_consumer(api, stream, name))


async def fetch_batch(
    api: JetStreamApi,
    stream: str,
    reading: ReadingConsumer,
    *,
    batch: int,
    max_wait: float,
    send: Send | None = None,
    all_header_values: bool = True,
    no_wait: bool = False,
) -> list[Delivery]:
    """One pull request for up to ``batch`` messages of ``reading`` that waits up to ``max_wait`` seconds for
    them (at most half the consumer's ``ack_wait``, so none is due again before it is returned): the
    messages, in delivery order, each sequence once, once the request is over (full, expired, or nothing left).
    With ``no_wait`` the request takes the messages there are now and is over at once (``max_wait`` then only
    bounds the wait for the server's answer).

    Each message of an ackable consumer gets an :class:`AckHandle` sending through ``send`` (default: this
    API's connection, while it is open). Repeated header values are read with ``STREAM.MSG.GET`` when
    ``all_header_values`` (default True). A pull a clustered JetStream answers "no leader" (503) before any
    message, as a node leading the consumer dies, is sent again after the election (the one retry rule,
    :func:`~airflow_provider_jetstream.core.api.retry_failover`, within the API's ``failover`` seconds).
    Raises :class:`JetStreamDomainUnavailableError` when no JetStream answered the pull,
    :class:`JetStreamNotFoundError` when the consumer was deleted, and :class:`JetStreamError` when the
    server refused it.
    """
    if batch < 1:
        raise JetStreamConfigError(f"batch={batch} must be >= 1")
    send = send or functools.partial(send_settle, api)
    where = f"consumer {reading.name!r} on stream {stream!r} in {api.target}"
    if reading.ackable and reading.ack_wait:
        # Held past its ack_wait, a message is delivered again, to this very request if it still waits.
        max_wait = min(max_wait, reading.ack_wait / 2)
    taken = await retry_failover(
        lambda: _pull(api, stream, reading.name, batch, max_wait, no_wait, where),
        api.nc,
        within=api.failover,
        what=where,
    )
    newest = {meta.sequence: (msg, meta) for msg, meta in taken}  # delivered twice: the newest reply acks it
    return [await _delivery(api, stream, msg, meta, reading, send, all_header_values) for msg, meta in newest.values()]


async def _pull(
    api: JetStreamApi, stream: str, consumer: str, batch: int, max_wait: float, no_wait: bool, where: str
) -> list[tuple[Msg, AckReply]]:
    """One pull request's messages with their ack replies' metadata, in delivery order."""
    requests = PullRequests(
        api.nc, api.prefix, stream, consumer, expires=max_wait, heartbeat=None, pipelined=False, no_wait=no_wait
    )
    incoming: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_msg(msg: Msg) -> None:
        incoming.put_nowait(msg)

    taken: list[tuple[Msg, AckReply]] = []
    await requests.listen(on_msg)
    try:
        await requests.ask(batch)
        deadline = asyncio.get_running_loop().time() + max_wait + STATUS_GRACE
        while len(taken) < batch:
            left = deadline - asyncio.get_running_loop().time()
            try:
                msg = await next_item(incoming, max(0.0, left))
            except asyncio.TimeoutError:
                break  # the request's end was not heard: what came is the batch
            meta = parse_ack_reply(msg.reply)
            if meta is not None:
                requests.received()
                taken.append((msg, meta))
                continue
            status = requests.status(msg.headers)
            if status is None or status.outcome == HEARTBEAT:
                continue
            if status.outcome == REQUEST_DONE:
                break
            if status.outcome == RESUME:
                raise JetStreamNotFoundError(f"{where} was deleted while it was pulled")
            if status.outcome == FATAL:
                raise JetStreamError(f"{where}: the server refused the pull: {status.reason}")
            if taken:
                break  # the request ended with what it delivered
            raise JetStreamDomainUnavailableError(f"{where}: the pull was answered {status.reason}")
    finally:
        await requests.close()
    return taken


async def _delivery(
    api: JetStreamApi,
    stream: str,
    msg: Msg,
    meta: AckReply,
    reading: ReadingConsumer,
    send: Send,
    all_header_values: bool,
) -> Delivery:
    headers = None
    if msg.headers:
        headers = {k: [v] for k, v in msg.headers.items()}
        if all_header_values:
            headers = await stored_headers(api, stream, meta.sequence) or headers
    handle = AckHandle(msg.reply, send) if reading.ackable else None
    return delivery_of(msg, meta, stream, reading.name, domain_of(api.prefix), headers, handle)


def delivery_of(
    msg: Msg,
    meta: AckReply,
    stream: str,
    consumer: str,
    domain: str | None,
    headers: dict[str, list[str]] | None,
    handle: AckHandle | None = None,
) -> Delivery:
    """The :class:`Delivery` of a delivered message and its ack reply's metadata (the durable puller's too)."""
    return Delivery(
        stream=stream,
        consumer=consumer,
        subject=msg.subject,
        sequence=meta.sequence,
        delivered=meta.delivered,
        timestamp_ns=meta.timestamp_ns,
        data=msg.data,
        headers=headers,
        domain=domain,
        pending=meta.pending,
        handle=handle,
    )
