"""The one pull engine: the pull requests of one consumer on one inbox, what they still owe, and what the server says.

Every reader of the package pulls through it: the exact-range reader
(:mod:`airflow_provider_jetstream.core.read.range`), the first-sequence lookup
(:mod:`airflow_provider_jetstream.core.read.seek`) and the durable puller of the event triggers
(:mod:`airflow_provider_jetstream.core.consume.durable`). A reader decides how much to ask for and what
each outcome means for it; :class:`PullRequests` sends the requests
(``<api prefix>.CONSUMER.MSG.NEXT.<stream>.<consumer>``, answered on a fresh inbox), counts the
messages they still owe, reads every status with
:func:`~airflow_provider_jetstream.core.protocol.pull_status` (the one interpretation of the server's
statuses) and says when requests have stalled: no sign of the server for three heartbeats while
messages are owed (a reconnect loses pull requests). The pull path pauses with the one retry pause,
:class:`~airflow_provider_jetstream.core.api.Backoff`: after a retry-after, pull again
after a pause that doubles each time, up to a cap, and starts again from the first pause once data flows.

Also the ephemeral consumers a range read and the first-sequence lookup create and delete, through
the one JetStream API speaker (:class:`~airflow_provider_jetstream.core.api.JetStreamApi`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.api import (
    STREAM_NOT_FOUND,
    JetStreamApi,
    JetStreamApiError,
    clustered,
    hint_for,
)
from airflow_provider_jetstream.core.arguments.durations import parse_instant
from airflow_provider_jetstream.core.errors import (
    JetStreamConnectionError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNoLeaderError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.protocol import HEARTBEAT, REQUEST_DONE, PullStatus, pull_status

#: Heartbeats without any sign of the server after which owed messages count as lost.
STALL_HEARTBEATS = 3


class PullRequests:
    """Pull requests of one consumer, answered on one inbox: what is owed, what the server said.

    :param nc: a connected client. :param api_prefix: the JetStream API prefix of the stream's domain.
    :param stream: stream name. :param consumer: consumer name.
    :param expires: seconds a request waits on the server.
    :param heartbeat: seconds between the server's idle heartbeats while a request waits (None: none
        asked for; then only the request's expiry says the server is there).
    :param max_bytes: bytes one request may return at most (None: no limit).
    :param pipelined: several requests may be open at once (the range reader). A status that ends a
        request without saying how many messages it still owed then leaves the count alone (a stall tells).
        With one request at a time (False: the durable puller) every status but a heartbeat ends it.
    :param no_wait: each request takes only the messages there are now, and ends at once (status 404 or
        408) instead of waiting ``expires`` for more. Default False.
    """

    def __init__(
        self,
        nc: Client,
        api_prefix: str,
        stream: str,
        consumer: str,
        *,
        expires: float,
        heartbeat: float | None,
        max_bytes: int | None = None,
        pipelined: bool = True,
        no_wait: bool = False,
    ) -> None:
        self.nc = nc
        self.consumer = consumer
        self.subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.expires = expires
        self.heartbeat = heartbeat
        self.max_bytes = max_bytes
        self.pipelined = pipelined
        self.no_wait = no_wait
        self.inbox = nc.new_inbox()
        self.sub: Any = None
        #: Messages asked for and neither received nor released by a status.
        self.outstanding = 0
        #: ``time.monotonic()`` of the last request sent, and of the last sign of the server.
        self.sent_at = 0.0
        self.last_sign = time.monotonic()

    async def listen(self, on_message: Callable[[Any], Awaitable[None]]) -> Any:
        """Subscribe the inbox (unbounded: the requests bound what can arrive); returns the subscription."""
        self.sub = await self.nc.subscribe(self.inbox, cb=on_message, pending_msgs_limit=0, pending_bytes_limit=0)
        return self.sub

    async def close(self) -> None:
        """Stop listening on the inbox (late answers of the requests are dropped)."""
        sub, self.sub = self.sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

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
        self.sent_at = self.last_sign = time.monotonic()

    def heard(self) -> None:
        """A sign of the server arrived (a message, taken later)."""
        self.last_sign = time.monotonic()

    def received(self, count: int = 1) -> None:
        """``count`` messages of the requests arrived."""
        self.outstanding = max(0, self.outstanding - count)
        self.last_sign = time.monotonic()

    def status(self, headers: Mapping[str, str] | None) -> PullStatus | None:
        """Read a status message (None: not one) and settle what it says of the requests: a request that is
        over owes nothing more; with one request at a time, any status but a heartbeat ends it."""
        status = pull_status(headers)
        if status is None:
            return None
        self.last_sign = time.monotonic()
        if status.outcome == HEARTBEAT:
            return status
        if not self.pipelined or status.every_request:
            self.outstanding = 0
        elif status.outcome == REQUEST_DONE and status.unfilled is not None:
            self.outstanding = max(0, self.outstanding - status.unfilled)
        return status

    def forget(self) -> None:
        """Count nothing as owed any more (the requests are lost, or replaced)."""
        self.outstanding = 0

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


class EphemeralConsumer(NamedTuple):
    """A reader's consumer as the server created it: ``name``, the messages it has ``pending``, and the stream
    sequence it starts ``after`` (the server chose its first sequence, ``after + 1``: the first stored at
    or after the start time, or the next one to be stored when none is yet)."""

    name: str
    pending: int
    after: int


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
) -> EphemeralConsumer:
    """Create a pull consumer that only this reader uses: no acks, delivering from ``start_seq`` (or the
    first message stored at or after ``start_time``, or with ``last_per_subject`` the last message of each
    subject: a KV watch), only ``filter_subjects`` if given, in memory, one
    replica, deleted by the server after ``inactive_threshold`` seconds without a pull (a reader that
    died leaves nothing behind). Returns its name (``<kind>_<random>``), the messages it has pending and
    the stream sequence it starts after (see :class:`EphemeralConsumer`).

    The create is asked again across a failover (the API's one retry rule). ``where`` names the stream in
    errors: :class:`JetStreamNotFoundError` when it does not exist, :class:`JetStreamNoLeaderError` when the
    cluster still has no leader for it, :class:`JetStreamDomainUnavailableError` when no JetStream answers
    for it, :class:`JetStreamError` for
    another refusal.
    """
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
    return EphemeralConsumer(name, int(info.get("num_pending") or 0), int(delivered.get("stream_seq") or 0))


async def discard_consumer(api: JetStreamApi, stream: str, name: str) -> None:
    """Delete a reader's own consumer, best effort (the server deletes it once inactive anyway)."""
    if api.nc.is_closed:
        return
    with contextlib.suppress(Exception):
        await api.delete_consumer(stream, name, missing_ok=True)
