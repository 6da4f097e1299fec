"""The consumer engine's pull subscription: one consumer's pull requests on one inbox, its frames, and the one
reading of what the server says.

Every reader of the package pulls through :class:`PullSubscription`: exact ranges
(:mod:`~airflow_provider_jetstream.core.read.exact`), ordered reads and watches
(:mod:`~airflow_provider_jetstream.core.read.ordered`), fetching and consuming
(:mod:`~airflow_provider_jetstream.core.consume.fetch`), the event triggers' durable puller and the
await-message match (:mod:`~airflow_provider_jetstream.core.consume.durable`). It

- sends the pull requests (``<api prefix>.CONSUMER.MSG.NEXT.<stream>.<consumer>``, answered on a fresh inbox)
  and counts the messages they still owe;
- takes the inbox's frames as bytes (:mod:`~airflow_provider_jetstream.core.wire.intake`): each message goes to
  the reader's ``on_message`` as it arrives, with its reply subject (the ack metadata) and its raw header
  block (every value of a repeated header), no message object and no request per message;
- reads every status frame once, here (:meth:`PullSubscription.react`, through
  :func:`~airflow_provider_jetstream.core.protocol.pull_status`), into state the reader's loop acts on:
  :attr:`~PullSubscription.failure` (the same request would be refused again), :attr:`~PullSubscription.gone`
  (the consumer was deleted), :attr:`~PullSubscription.retry_at` (nothing can serve the pull now: pull again
  after a pause of the one resend rule, doubling up to
  the request's expiry and starting over once data flows, :func:`~airflow_provider_jetstream.core.resend.pull_pauses`),
  :attr:`~PullSubscription.request_over` (the request
  ended), the last heartbeat's sequences, and whether requests have stalled (no sign of the server for three
  heartbeats while messages are owed: a reconnect loses pull requests).

Readers differ only in what they ask for and what a message means to them. Also the ephemeral consumers
readers create and delete, through the one JetStream API speaker.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import nats.errors
from nats.aio.subscription import Subscription

from airflow_provider_jetstream.core.api import STREAM_NOT_FOUND, JetStreamApi, JetStreamApiError, hint_for
from airflow_provider_jetstream.core.arguments.durations import parse_instant
from airflow_provider_jetstream.core.arguments.names import check_stream_filter
from airflow_provider_jetstream.core.connection.client import clustered
from airflow_provider_jetstream.core.errors import (
    JetStreamConnectionError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNoLeaderError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.protocol import (
    FATAL,
    HEARTBEAT,
    REQUEST_DONE,
    RESUME,
    RETRY_AFTER,
    PullStatus,
    pull_status,
    status_headers,
)
from airflow_provider_jetstream.core.resend import pull_pauses
from airflow_provider_jetstream.core.tasks import wait_event
from airflow_provider_jetstream.core.wire.intake import FrameHandler, subscribe_frames, unsubscribe_frames

#: Heartbeats without any sign of the server after which owed messages count as lost.
STALL_HEARTBEATS = 3
_ACK_REPLY = b"$JS.ACK."

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PullRequests:
    """How a subscription's pull requests are made.

    :param expires: seconds a request waits on the server.
    :param heartbeat: seconds between the server's idle heartbeats while a request waits (None: none asked
        for; then only the request's expiry says the server is there).
    :param max_bytes: bytes one request may return at most (None, the default: no limit; dropped when a
        message is larger).
    :param pipelined: several requests may be open at once (the range reader). A status that ends a request
        without saying how many messages it still owed then leaves the count alone (a stall tells). With one
        request at a time (False) every status but a heartbeat ends it. Default True.
    :param no_wait: each request takes only the messages there are now, and ends at once (status 404 or 408)
        instead of waiting ``expires`` for more. Default False.
    """

    expires: float
    heartbeat: float | None
    max_bytes: int | None = None
    pipelined: bool = True
    no_wait: bool = False


class PullSubscription:
    """Pull requests of one consumer, answered on one inbox: what is owed, what the server said.

    :param api: the JetStream API of the stream's domain or prefix (its client sends the requests).
    :param stream: stream name.
    :param consumer: consumer name.
    :param on_message: ``on_message(subject, reply, headers, payload)``, bytes each, for every message the
        requests deliver, in wire order, in the client's read loop (it must not block).
    :param requests: how the requests are made (:class:`PullRequests`); kept as this subscription's attributes
        (``expires``, ``heartbeat``, ``max_bytes``, ``pipelined``, ``no_wait``), which its reader may change
        between requests. The longest pause after "retry after" is ``expires``.
    :param changed: the event set at every status (the reader sets it for its messages as it needs; the
        reader's loop waits on it). Default: a new one.
    :param on_idle: ``on_idle(last_stream_seq)``, called in the read loop when a heartbeat says the consumer
        has nothing to deliver now (with the last stream sequence it delivered). Default None.
    """

    def __init__(
        self,
        api: JetStreamApi,
        stream: str,
        consumer: str,
        on_message: FrameHandler,
        requests: PullRequests,
        *,
        changed: asyncio.Event | None = None,
        on_idle: Callable[[int], None] | None = None,
    ) -> None:
        self.api = api
        self.nc = api.nc
        self.stream, self.consumer = stream, consumer
        self.on_message = on_message
        self.subject = f"{api.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.where = f"consumer {consumer!r} on stream {stream!r} in {api.target}"
        self.expires, self.heartbeat, self.max_bytes = requests.expires, requests.heartbeat, requests.max_bytes
        self.pipelined, self.no_wait = requests.pipelined, requests.no_wait
        self.inbox = self.nc.new_inbox()
        self.sub: Subscription | None = None
        #: Messages asked for and neither received nor released by a status.
        self.outstanding = 0
        #: ``time.monotonic()`` of the last request sent, and of the last sign of the server.
        self.sent_at = 0.0
        self.last_sign = time.monotonic()
        self.backoff = pull_pauses(requests.expires)
        #: Set by :meth:`react` only. The server refused a request as it would refuse it again.
        self.failure: JetStreamError | None = None
        #: The consumer was deleted (its status), until the reader :meth:`clear` s it.
        self.gone: PullStatus | None = None
        #: Nothing can serve a pull now: pull again at this ``time.monotonic()`` (0: at once).
        self.retry_at = 0.0
        #: The last status that interrupted the reading ("retry after", "consumer deleted"), for messages.
        self.interrupted: PullStatus | None = None
        #: The request (one at a time) ended.
        self.request_over = False
        #: The last heartbeat's ``Nats-Last-Stream`` and ``Nats-Last-Consumer`` (None before one).
        self.last_stream_seq: int | None = None
        self.last_consumer_seq: int | None = None
        #: Set at every status (and by the reader at its messages): the reader's loop waits on it.
        self.changed = changed or asyncio.Event()
        self.on_idle = on_idle

    # -- the inbox -------------------------------------------------------------------------------

    async def open(self) -> PullSubscription:
        """Subscribe the inbox (unbounded: the requests bound what can arrive)."""
        self.sub = await subscribe_frames(self.nc, self.inbox, self._on_frame)
        return self

    async def close(self) -> None:
        """Stop taking the inbox's frames (late answers of the requests are dropped)."""
        sub, self.sub = self.sub, None
        if sub is not None:
            await unsubscribe_frames(sub)

    def _on_frame(self, subject: bytes, reply: bytes, headers: bytes, payload: bytes) -> None:
        if reply.startswith(_ACK_REPLY):
            self.outstanding -= self.outstanding > 0
            self.last_sign = time.monotonic()
            self.on_message(subject, reply, headers, payload)
        else:
            self.react_to_block(headers)

    # -- requests --------------------------------------------------------------------------------

    async def ask(self, batch: int) -> None:
        """Send one pull request for ``batch`` messages; the provider's errors when it cannot be sent
        (:class:`JetStreamDomainUnavailableError` while the connection is re-established,
        :class:`JetStreamConnectionError` once it is closed)."""
        body: dict[str, Any] = {"batch": batch}
        if self.no_wait:
            body["no_wait"] = True
        else:
            body["expires"] = int(self.expires * 1e9)
        if self.heartbeat:
            body["idle_heartbeat"] = int(self.heartbeat * 1e9)
        if self.max_bytes:
            body["max_bytes"] = self.max_bytes
        try:
            await self.nc.publish(self.subject, json.dumps(body).encode(), reply=self.inbox)
        except (
            nats.errors.ConnectionReconnectingError,
            nats.errors.StaleConnectionError,
            nats.errors.OutboundBufferLimitError,
        ) as err:
            raise JetStreamDomainUnavailableError(
                f"a pull of consumer {self.consumer!r} was not sent: the connection is being re-established ({err!r})"
            ) from err
        except nats.errors.Error as err:
            raise JetStreamConnectionError(f"a pull of consumer {self.consumer!r} was not sent: {err!r}") from err
        self.outstanding += batch
        self.request_over = False
        self.sent_at = self.last_sign = time.monotonic()

    def received(self, count: int = 1) -> None:
        """``count`` messages of the requests arrived (a sign of the server)."""
        self.outstanding = max(0, self.outstanding - count)
        self.last_sign = time.monotonic()

    def forget(self) -> None:
        """Count nothing as owed any more (the requests are lost, or replaced)."""
        self.outstanding = 0

    # -- the one reading of statuses ---------------------------------------------------------------

    def react_to_block(self, raw: bytes) -> PullStatus | None:
        """Read a status frame's raw header block (:meth:`react`); None when the frame is not a status."""
        return self.react(pull_status(status_headers(raw)) if raw else None)

    def react(self, status: PullStatus | None) -> PullStatus | None:
        """What a status says, for the requests and for the reader: every status the server sends to a pull
        is read here and nowhere else (see the module doc). Returns the status (None: not one)."""
        if status is None:
            return None
        self.last_sign = time.monotonic()
        if status.outcome == HEARTBEAT:
            self.last_stream_seq = status.last_stream_seq
            self.last_consumer_seq = status.last_consumer_seq
            if self.on_idle is not None:
                self.on_idle(status.last_stream_seq or 0)
            self.changed.set()
            return status
        if not self.pipelined or status.every_request:
            self.outstanding = 0
            self.request_over = True
        elif status.outcome == REQUEST_DONE and status.unfilled is not None:
            self.outstanding = max(0, self.outstanding - status.unfilled)
        if status.outcome == REQUEST_DONE:
            self.backoff.reset()
            if status.oversized and self.max_bytes:
                log.warning("%s: a message is larger than %d bytes; pulling without a byte limit", self.where,
                            self.max_bytes)  # fmt: skip
                self.max_bytes = None
        elif status.outcome == RETRY_AFTER:
            delay = self.backoff.next()
            log.warning("%s: the pull was answered %s; pulling again in %.0fs", self.where, status.reason, delay)
            self.retry_at = time.monotonic() + delay
            self.interrupted = status
        elif status.outcome == RESUME:
            self.gone = self.interrupted = status
        elif status.outcome == FATAL:
            self.failure = JetStreamError(f"{self.where}: the server refused the pull: {status.reason}")
        self.changed.set()
        return status

    def flowing(self) -> None:
        """Messages flow again: the next pause starts from the first one."""
        self.backoff.reset()

    def clear(self) -> None:
        """The reader acted on an interruption (made the consumer again, found it there): forget it."""
        self.gone = self.interrupted = None
        self.retry_at = 0.0

    def paused(self, now: float | None = None) -> float:
        """Seconds until a pull may be sent again after "retry after" (0: now)."""
        return max(0.0, self.retry_at - (time.monotonic() if now is None else now))

    def no_responders(self) -> bool:
        """The interruption was "no responders": no JetStream answered the pull (a domain cut off, a failover)."""
        return self.interrupted is not None and self.interrupted.no_responders

    # -- silence ---------------------------------------------------------------------------------

    def silence(self, now: float | None = None) -> float:
        """Seconds since the last sign of the server (a message, a status) or the last request sent."""
        return (time.monotonic() if now is None else now) - self.last_sign

    def silent(self, now: float | None = None) -> bool:
        """The server gave no sign for :data:`STALL_HEARTBEATS` heartbeats (without heartbeats: two ``expires``)."""
        bound = STALL_HEARTBEATS * self.heartbeat if self.heartbeat else self.expires * 2
        return self.silence(now) > bound

    def stalled(self, now: float | None = None) -> bool:
        """Messages are owed and the server is :meth:`silent`."""
        return self.outstanding > 0 and self.silent(now)

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message or a status; False when none came."""
        self.changed.clear()
        return await wait_event(self.changed, timeout)


class EphemeralConsumer(NamedTuple):
    """A reader's consumer as the server created it: ``name``, the messages it has ``pending``, and the stream
    sequence it starts ``after`` (the server chose its first sequence, ``after + 1``: the first stored at
    or after the start time, or the next one to be stored when none is yet), and the stream's config its filter
    was checked against (None: no filter), for the next consumer of the same reader."""

    name: str
    pending: int
    after: int
    stream_config: Mapping[str, Any] | None = None


async def create_ephemeral_consumer(
    api: JetStreamApi,
    stream: str,
    *,
    where: str,
    start_seq: int | None = None,
    start_time: str | dt.datetime | None = None,
    last_per_subject: bool = False,
    filter_subjects: Sequence[str] = (),
    inactive_threshold: float = 120.0,
    kind: str = "read",
    stream_config: Mapping[str, Any] | None = None,
) -> EphemeralConsumer:
    """Create a pull consumer that only this reader uses: no acks, delivering from ``start_seq`` (or the
    first message stored at or after ``start_time``, or with ``last_per_subject`` the last message of each
    subject: a watch's start), only ``filter_subjects`` if given, in memory, one replica, deleted by the
    server after ``inactive_threshold`` seconds without a pull (a reader that died leaves nothing behind).
    Returns its name (``<kind>_<random>``), the messages it has pending and the stream sequence it starts
    after (see :class:`EphemeralConsumer`).

    The create is asked again across a failover (the API's one retry rule). ``where`` names the stream in
    errors: :class:`JetStreamNotFoundError` when it does not exist, :class:`JetStreamNoLeaderError` when the
    cluster still has no leader for it, :class:`JetStreamDomainUnavailableError` when no JetStream answers
    for it, :class:`JetStreamError` for another refusal. A filter that overlaps none of the stream's subjects is
    refused (:class:`SpecError` naming ``filter_subjects``): the server accepts it and the reader would wait for
    ever. That is checked against ``stream_config`` (the stream's config, asked of the server when not given).
    """
    if filter_subjects:
        if stream_config is None:
            info = await api.stream_info(stream)
            if info is None:
                raise JetStreamNotFoundError(f"{where} does not exist")
            stream_config = info.get("config") or {}
        check_stream_filter(filter_subjects, stream_config, "filter_subjects", where)
    name = f"{kind}_{uuid.uuid4().hex}"
    config: dict[str, Any] = {
        "name": name,
        "ack_policy": "none",
        "replay_policy": "instant",
        "inactive_threshold": int(inactive_threshold * 1e9),
        "mem_storage": True,
        "num_replicas": 1,
    }
    if last_per_subject:
        config["deliver_policy"] = "last_per_subject"
    elif start_time is not None:
        config.update(deliver_policy="by_start_time", opt_start_time=parse_instant(start_time, "start_time"))
    else:
        config.update(deliver_policy="by_start_sequence", opt_start_seq=start_seq or 1)
    if len(filter_subjects) == 1:
        config["filter_subject"] = filter_subjects[0]
    elif filter_subjects:
        config["filter_subjects"] = list(filter_subjects)
    try:
        info = await api.request(f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": config})
    except JetStreamApiError as err:
        if err.err_code == STREAM_NOT_FOUND:
            raise JetStreamNotFoundError(f"{where} does not exist") from None
        raise JetStreamError(f"{where}: could not create a reading consumer: {err.description}") from None
    except JetStreamNoLeaderError:
        raise  # it names the stream and the cause already
    except JetStreamDomainUnavailableError as err:
        hint = hint_for(api.nc, api.prefix) if clustered(api.nc) else "is the domain connected?"
        raise JetStreamDomainUnavailableError(
            f"no JetStream answered for {where} within {api.timeout:g}s: {hint}"
        ) from err
    delivered = info.get("delivered") or {}
    pending, after = int(info.get("num_pending") or 0), int(delivered.get("stream_seq") or 0)
    return EphemeralConsumer(name, pending, after, stream_config)


async def discard_consumer(api: JetStreamApi, stream: str, name: str) -> None:
    """Delete a reader's own consumer, best effort (the server deletes it once inactive anyway)."""
    if api.nc.is_closed:
        return
    with contextlib.suppress(Exception):
        await api.delete_consumer(stream, name, missing_ok=True)
