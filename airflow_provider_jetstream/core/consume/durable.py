"""At-least-once consumption: ensure a durable pull consumer, pull a bounded in-flight window, settle each message."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import NamedTuple

import nats.errors
from nats.aio.client import Client

from airflow_provider_jetstream.core.api import JetStreamApi, domain_of
from airflow_provider_jetstream.core.consume.ack_floor import AckFloor
from airflow_provider_jetstream.core.consume.deliveries import Settlement, Ticket
from airflow_provider_jetstream.core.errors import (
    JetStreamConfigError,
    JetStreamDomainUnavailableError,
    JetStreamError,
    JetStreamNotFoundError,
)
from airflow_provider_jetstream.core.manage.reconcile import reconcile_consumer
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.protocol import ACK, IN_PROGRESS, TERM, nak_body, parse_ack_reply
from airflow_provider_jetstream.core.read.delivery import make_delivery
from airflow_provider_jetstream.core.read.identity import same_stream, stream_identity
from airflow_provider_jetstream.core.read.pull import PullRequests, PullSubscription
from airflow_provider_jetstream.core.tasks import stop_task

log = logging.getLogger(__name__)

#: Consumer fields that only apply when the consumer is created ("first start").
FIRST_START_ONLY = ("deliver_policy", "start_seq", "start_time")


#: What the refusal of a second puller advises by default (the event triggers' case).
SHARING_ADVICE = "Keep the watchers of one consumer in one triggerer, or give each watcher its own consumer name"

#: Ack policies a durable consumer of Airflow's may have: each message acked, or a floor acked.
ACK_POLICIES = ("explicit", "all")


class EnsuredConsumer(NamedTuple):
    """What :func:`ensure_consumer` did (``created``, ``updated``, ``unchanged``) and the consumer's ack policy."""

    action: str
    ack_policy: str


async def ensure_consumer(
    api: JetStreamApi, stream: str, spec: ConsumerSpec, *, logger: logging.Logger | logging.LoggerAdapter = log
) -> EnsuredConsumer:
    """Create the durable pull consumer ``spec`` on ``stream``, or reconcile an existing one.

    The ack policy (``explicit``, default, or ``all``), the deliver policy and the start position
    apply only on creation: an existing consumer keeps them and its ack floor (it is never
    recreated). An existing consumer with ``ack_policy`` ``none`` (nothing can be acked after
    Airflow stored it), or another change the server would only make by recreating it (push
    fields), raises ``JetStreamConfigError``. Returns the action and the consumer's ack policy.
    """
    info = await api.consumer_info(stream, spec.name)
    if info is None:
        result = await reconcile_consumer(api, stream, spec, if_exists="update", logger=logger)
        return EnsuredConsumer(result.action, str(spec.values.get("ack_policy", "explicit")))
    ack_policy = (info.get("config") or {}).get("ack_policy", "explicit")
    if ack_policy not in ACK_POLICIES:
        raise JetStreamConfigError(
            f"consumer {spec.name!r} on stream {stream!r} in {api.target} has ack_policy={ack_policy!r}: "
            "acking each message only after Airflow stored it needs ack_policy 'explicit' or 'all'; "
            "use another consumer name"
        )
    values = {k: v for k, v in spec.values.items() if k not in FIRST_START_ONLY}
    if values.get("ack_policy", "explicit") != ack_policy:
        logger.info("consumer %r on stream %r keeps its ack_policy %r", spec.name, stream, ack_policy)
    values["ack_policy"] = ack_policy
    kept = ConsumerSpec(values=values, path=spec.path)
    result = await reconcile_consumer(api, stream, kept, if_exists="update", logger=logger)
    return EnsuredConsumer(result.action, ack_policy)


class DurablePuller:
    """Pulls a durable consumer and keeps every message it hands out alive until it is settled.

    At most ``max_in_flight`` messages are handed out and unsettled at any time: the caller's
    consumers have bounded queues. While a message is unsettled a ``+WPI`` renews it every
    ``ack_wait / 3`` seconds, so the server does not redeliver it while Airflow persists it.

    With ``ack_all`` (a consumer with ``ack_policy: all``, where an ack of stream sequence S acks
    every pending message up to S) one ack covers a floor: the highest S such that every message
    this puller holds up to S is settled as stored or rejected. A failed message holds the floor
    until it comes back and is settled; the stored ones after it stay held (kept alive, counted in
    ``max_in_flight``: they are pending on the server) and are acked with it. :attr:`floor` (an
    :class:`~airflow_provider_jetstream.core.consume.ack_floor.AckFloor`) keeps that bookkeeping.

    What it acked is known by stream sequence, so it records the stream's identity (:attr:`created`)
    when it starts. A stream deleted and created again under the same name deletes the consumer with
    it: when the consumer is found gone (a pull status, or the periodic consumer check), and before a
    delivery is taken for one already acked, the stream's identity is compared, and a recreated stream
    raises :class:`~airflow_provider_jetstream.core.errors.StreamRecreatedError` instead of pulling a
    consumer that no longer exists for ever, or acking the new stream's messages as old ones.

    :param nc: a connected client (shared: the puller never closes it).
    :param api: the JetStream API (domain or prefix) of the stream.
    :param stream: stream name.
    :param consumer: durable consumer name.
    :param max_in_flight: unsettled messages at most (with ``ack_all``: held ones, settled or not).
        Default 256.
    :param ack_wait: the consumer's ack wait in seconds (drives the ``+WPI`` period). Default 30.
    :param expires: seconds one pull request waits on the server. Default 10: after a stop, what
        the server still sends to the last request comes back only after ``ack_wait``.
    :param heartbeat: idle heartbeat seconds; 3 missed heartbeats re-issue the request. Default 2.5.
    :param nak_delay: first redelivery delay after a failure; doubles per delivery. Default 1.
    :param nak_max_delay: the largest redelivery delay. Default 60.
    :param idle_delay: redelivery delay of a message nobody was listening for. Default 5.
    :param ack_all: the consumer has ``ack_policy: all`` (acks cover a floor). Default False.
    :param sharing_advice: what the refusal of a second puller of the consumer tells the user to do.
        Default: the event triggers' advice (one triggerer per consumer, or a consumer per watcher).
    """

    def __init__(
        self,
        nc: Client,
        api: JetStreamApi,
        stream: str,
        consumer: str,
        *,
        max_in_flight: int = 256,
        ack_wait: float = 30.0,
        expires: float = 10.0,
        heartbeat: float = 2.5,
        nak_delay: float = 1.0,
        nak_max_delay: float = 60.0,
        idle_delay: float = 5.0,
        ack_all: bool = False,
        sharing_advice: str = SHARING_ADVICE,
    ) -> None:
        if max_in_flight < 1:
            raise JetStreamConfigError(f"max_in_flight={max_in_flight} must be >= 1")
        self.nc, self.api, self.stream, self.consumer = nc, api, stream, consumer
        self.domain = domain_of(api.prefix)
        self.max_in_flight = max_in_flight
        self.ack_wait, self.expires, self.heartbeat = ack_wait, expires, heartbeat
        self.nak_delay, self.nak_max_delay, self.idle_delay = nak_delay, nak_max_delay, idle_delay
        self.ack_all, self.sharing_advice = ack_all, sharing_advice
        self.in_flight: dict[int, Ticket] = {}
        self.recently_acked: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.counts: collections.Counter[str] = collections.Counter()
        self._arrived: collections.deque[tuple[bytes, bytes, bytes, bytes]] = collections.deque()
        self._room = asyncio.Event()
        self._room.set()
        # One pull request at a time, for the room left: at most max_in_flight unsettled. After "retry after"
        # it pauses doubling up to the request's expiry: a relinked leaf is heard from soon.
        self.requests = PullSubscription(
            api, stream, consumer, self._on_frame, PullRequests(expires, heartbeat, pipelined=False)
        )
        self._renewer: asyncio.Task[None] | None = None
        self._next_rival_check = 0.0
        self._rival_since: float | None = None
        #: The stream's identity when pulling started (``created``; None until then, or if unknown).
        self.created: str | None = None
        self._identity_checked_at = 0.0
        self._missing_since: float | None = None
        # ack_policy all: the floor bookkeeping over in_flight (shared with it, as are the counts).
        self.floor = AckFloor(api, stream, consumer, self.in_flight, self.counts) if ack_all else None

    # -- pulling ----------------------------------------------------------------------------

    async def deliveries(self) -> AsyncIterator[Ticket]:
        """Messages in delivery order, each as a :class:`Ticket`, forever (or until an error).

        A message redelivered while still unsettled here is not handed out again (its ack
        subject is updated); one redelivered after it was acked is acked again. With ``ack_all``
        a failed message is handed out again when it comes back.
        """
        self.created = await self._identity_now()
        self._identity_checked_at = time.monotonic()
        if self.floor is not None:
            await self.floor.sync()
        await self.requests.open()
        self._renewer = asyncio.create_task(self._renew(), name=f"jetstream-wpi[{self.stream}>{self.consumer}]")
        try:
            self._next_rival_check = time.monotonic() + self.expires
            while True:
                await self._interrupted()
                await self._maybe_request()
                await self._check_rivals()
                if not self._arrived:
                    wait = self.heartbeat
                    paused = self.requests.paused()
                    if not self.requests.outstanding and paused:
                        wait = min(wait, max(0.01, paused))
                    if not await self.requests.wait(wait) and self.requests.stalled():
                        # A reconnect loses pull requests: ask again.
                        log.info("%s > %s: no sign of the server; pulling again", self.stream, self.consumer)
                        self.requests.forget()
                while self._arrived:
                    ticket = await self._accept(*self._arrived.popleft())
                    if ticket is not None:
                        yield ticket
        finally:
            await self.stop()

    def _on_frame(self, subject: bytes, reply: bytes, headers: bytes, payload: bytes) -> None:
        self._arrived.append((subject, reply, headers, payload))
        self.requests.changed.set()

    def _room_now(self) -> int:
        if self.floor is not None:
            return self.floor.room(self.max_in_flight)
        return self.max_in_flight - len(self.in_flight)

    async def _maybe_request(self) -> None:
        while True:
            if self.requests.outstanding or self.requests.paused():
                return
            room = self._room_now()
            if room > 0:
                break
            self._room.clear()  # full: wait until messages are settled
            await self._room.wait()
        await self.requests.ask(room)

    async def _check_rivals(self) -> None:
        """Refuse to share the consumer with another client (a second triggerer): each message would
        reach only one of them, and the watchers of the other would miss it without a trace.

        Every ``expires`` seconds (half-way through this puller's open request where possible) the
        consumer's waiting pull requests are compared with this puller's (at most one). A surplus
        seen on two checks at least ``expires`` apart (a request a previous run left expires within
        that time) raises ``JetStreamConfigError``.
        """
        now = time.monotonic()
        # At a request's end, ours and a rival's started alongside turn over together (expire and are
        # asked again), and a check then can miss either: half-way through, both are waiting.
        request_open = self.requests.outstanding > 0
        mid_request = request_open and now - self.requests.sent_at >= self.expires / 2
        if now < self._next_rival_check or not (mid_request or now >= self._next_rival_check + self.expires / 2):
            return
        self._next_rival_check = now + self.expires
        try:
            info = await self.api.consumer_info(self.stream, self.consumer)
        except (JetStreamError, nats.errors.Error):
            return  # unreachable now (a cut, a restart): the pull path reports and retries
        if info is None:
            # Gone (pulls of it answer 503, as an unreachable domain's); seen on two checks (not a server
            # recovering its state): its stream was recreated, deleted, or only the consumer was deleted.
            if self._missing_since is None:
                self._missing_since = now
                return
            await self._same_stream()
            raise JetStreamError(self._gone("no longer exists (deleted?)"))
        self._missing_since = None
        others = int((info or {}).get("num_waiting", 0)) - (1 if request_open else 0)
        if others <= 0:
            self._rival_since = None
        elif self._rival_since is None:
            self._rival_since = now
        elif now - self._rival_since >= self.expires:
            raise JetStreamConfigError(
                f"consumer {self.consumer!r} on stream {self.stream!r} in {self.api.target} is also pulled by "
                f"another client ({others} more pull request(s) waiting for over {self.expires:g}s): each message "
                f"would reach only one of them, and the other reader would miss it. {self.sharing_advice}"
            )

    async def _interrupted(self) -> None:
        """Act on what the server said of the pulls (the engine read it): a refused pull ends the puller; a
        deleted consumer too, unless it is still there (a clustered consumer's leader that died says so while
        another takes over: pull again after the pause); "retry after" pauses the pulls (the engine's)."""
        requests = self.requests
        if requests.failure is not None:
            raise requests.failure
        if requests.gone is None:
            return
        requests.clear()
        await self._same_stream()
        if not await self._still_there():
            raise JetStreamError(self._gone("was deleted while pulling"))
        requests.retry_at = time.monotonic() + requests.backoff.next()

    async def _accept(self, subject: bytes, reply: bytes, headers: bytes, payload: bytes) -> Ticket | None:
        reply_text = reply.decode()
        meta = parse_ack_reply(reply_text)
        if meta is None:
            return None
        self.requests.flowing()
        if self.floor is not None:
            self.floor.received(meta.consumer_sequence)
        held = self.in_flight.get(meta.sequence)
        if held is not None and held.state == "fail":  # ack_policy all: the failed message is back, hand it out
            delivery = replace(held.delivery, delivered=meta.delivered, pending=meta.pending)
            ticket = Ticket(meta.sequence, reply_text, meta.delivered, delivery, meta.consumer_sequence)
            self.in_flight[meta.sequence] = ticket
            self.counts["redelivered"] += 1
            return ticket
        if held is not None:  # redelivered while we still hold it: keep one copy, ack via the newest subject
            held.reply, held.delivered, held.consumer_sequence = reply_text, meta.delivered, meta.consumer_sequence
            self.counts["redelivered_in_flight"] += 1
            return None
        acked = meta.sequence in self.recently_acked or (
            self.floor is not None and meta.sequence <= self.floor.acked_through
        )
        if acked and time.monotonic() - self._identity_checked_at >= self.expires:
            await self._same_stream()  # a sequence acked before: of this stream, not of a new one of that name?
        if self.floor is not None and await self.floor.covered(reply_text, meta.sequence, meta.consumer_sequence):
            return None  # below the floor acked already (that ack was lost)
        if meta.sequence in self.recently_acked:  # our ack was lost (a link cut): ack again, no second event
            await self.nc.publish(reply_text, ACK)
            self.counts["reacked"] += 1
            return None
        delivery = make_delivery(
            meta, reply_text, subject, headers, payload, self.stream, self.consumer, self.domain, None
        )
        ticket = Ticket(meta.sequence, reply_text, meta.delivered, delivery, meta.consumer_sequence)
        self.in_flight[meta.sequence] = ticket
        return ticket

    # -- the stream's identity ---------------------------------------------------------------

    def _gone(self, how: str) -> str:
        return (
            f"consumer {self.consumer!r} on stream {self.stream!r} {how} ({self.api.target}): "
            "it is created again when the trigger starts again"
        )

    async def _still_there(self) -> bool:
        """After a "consumer deleted" status: whether the consumer still exists. A clustered consumer's
        leader that died says so while another takes over; asked across the election (the API's retry
        rule), and while nobody can tell yet, it counts as there (the periodic check finds one really gone)."""
        try:
            return await self.api.consumer_info(self.stream, self.consumer) is not None
        except (JetStreamDomainUnavailableError, nats.errors.Error):
            return True

    async def _identity_now(self) -> str | None:
        """The stream's identity now; None when it cannot be told now (no answer). A stream that no
        longer exists raises :class:`JetStreamNotFoundError`."""
        try:
            return await stream_identity(self.api, self.stream)
        except JetStreamNotFoundError:
            raise JetStreamNotFoundError(
                f"stream {self.stream!r} no longer exists in {self.api.target} (deleted while consumer "
                f"{self.consumer!r} was pulling it)"
            ) from None
        except (JetStreamDomainUnavailableError, nats.errors.Error):
            return None

    async def _same_stream(self) -> None:
        """Raise :class:`StreamRecreatedError` if the stream was deleted and created again since pulling started."""
        current = await self._identity_now()
        self._identity_checked_at = time.monotonic()
        same_stream(
            self.stream,
            self.created,
            current,
            position=f"consumer {self.consumer!r} (what was delivered and acked, by stream sequence)",
            remedy=(
                "The consumer was deleted with the old stream: the trigger creates it again on the new stream "
                "(from its deliver_policy) when it starts again; nothing of the new stream was acked"
            ),
            logger=log,
        )

    # -- settling ---------------------------------------------------------------------------

    def redelivery_delay(self, delivered: int) -> float:
        """Seconds before a failed message comes back: ``nak_delay * 2**(delivered-1)``, at most ``nak_max_delay``."""
        return min(self.nak_max_delay, self.nak_delay * 2 ** max(0, delivered - 1))

    async def settle(self, items: Sequence[tuple[Ticket, Settlement]]) -> None:
        """Send each message's verdict, then flush once.

        ``ack`` → ``+ACK``; ``reject`` → ``+TERM`` (dead-lettering is the caller's, before this);
        ``fail`` → ``-NAK`` with the backoff delay; ``idle`` (nobody was listening) → ``-NAK`` with
        ``idle_delay``; ``leave`` → nothing (only forgotten here). Raises if the connection is closed: the
        server then redelivers.

        With ``ack_all`` the naks go out at once, and stored or rejected messages wait for the
        floor: one ``+ACK`` (``+TERM`` when the message at the floor was rejected) covers them all.
        """
        if self.floor is not None:
            await self.floor.settle(items, self._nak)
        else:
            for ticket, verdict in items:
                if verdict == "ack":
                    body = ACK
                    self.recently_acked[ticket.seq] = None
                    while len(self.recently_acked) > 10_000:
                        self.recently_acked.popitem(last=False)
                elif verdict == "reject":
                    body = TERM
                elif verdict == "leave":  # no reply at all: the server delivers it again after ack_wait
                    self.counts[verdict] += 1
                    self.in_flight.pop(ticket.seq, None)
                    continue
                else:
                    body = self._nak(ticket, verdict)
                await self.nc.publish(ticket.reply, body)
                self.counts[verdict] += 1
                self.in_flight.pop(ticket.seq, None)
        await self.nc.flush()
        self._room.set()

    def _nak(self, ticket: Ticket, verdict: Settlement) -> bytes:
        return nak_body(self.redelivery_delay(ticket.delivered) if verdict == "fail" else self.idle_delay)

    async def _renew(self) -> None:
        """Every ``ack_wait / 3`` seconds, keep the unsettled messages alive (:meth:`_keep_alive`)."""
        period = max(0.1, self.ack_wait / 3)
        while True:
            await asyncio.sleep(period)
            if self.in_flight and self.nc.is_connected:
                await self._keep_alive()

    async def _keep_alive(self) -> None:
        """``+WPI`` every unsettled message (with ``ack_all``, every held one but the failed ones, and move the
        floor if it can move now); a connection lost meanwhile leaves it to the next period."""
        with contextlib.suppress(nats.errors.Error):
            renewed = 0
            for ticket in list(self.in_flight.values()):
                if self.floor is not None and not self.floor.renews(ticket):
                    continue
                await self.nc.publish(ticket.reply, IN_PROGRESS)
                renewed += 1
            self.counts["wpi"] += renewed
            if self.floor is not None:
                try:
                    await self.floor.advance()
                    await self.nc.flush()
                except JetStreamError as err:
                    log.warning("%s > %s: cannot ack the floor now: %s", self.stream, self.consumer, err)

    async def stop(self) -> None:
        """Stop renewing; ``-NAK`` what is still unsettled so it comes back at once (best effort).

        With ``ack_all`` that includes the stored messages above the floor: they come back, and fire again.
        """
        with contextlib.suppress(asyncio.CancelledError):  # cancelled again: the naks below still go out
            await stop_task(self._renewer)
        self._renewer = None
        # First: what the naks bring back must not go to this inbox (it would be lost).
        await self.requests.close()
        if self.in_flight and self.nc.is_connected:
            with contextlib.suppress(Exception):
                await self.nc.flush()
                for ticket in list(self.in_flight.values()):
                    if ticket.state != "fail":  # a failed one was naked with its delay already
                        await self.nc.publish(ticket.reply, nak_body())
                await self.nc.flush()
        self.in_flight.clear()
