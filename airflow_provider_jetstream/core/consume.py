"""At-least-once consumption: ensure a durable pull consumer, pull a bounded in-flight window, settle each message."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from airflow_provider_jetstream.core.deliveries import Delivery, headers_from_api, parse_ack_reply
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamError
from airflow_provider_jetstream.core.jetstream_api import JetStreamApi, domain_of
from airflow_provider_jetstream.core.reconcile import reconcile_consumer
from airflow_provider_jetstream.core.specs.consumer import ConsumerSpec

log = logging.getLogger(__name__)

#: What became of one message: stored by every watcher, refused by one, not stored, nobody listening.
Settlement = Literal["ack", "reject", "fail", "idle"]

#: Consumer fields that only apply when the consumer is created ("first start").
FIRST_START_ONLY = ("deliver_policy", "start_seq", "start_time")


async def ensure_consumer(
    api: JetStreamApi, stream: str, spec: ConsumerSpec, *, logger: logging.Logger | logging.LoggerAdapter = log
) -> str:
    """Create the durable explicit-ack pull consumer ``spec`` on ``stream``, or reconcile an existing one.

    The deliver policy and start position apply only on creation: an existing consumer keeps its
    ack floor (it is never recreated). A change the server would only make by recreating it
    (ack policy, deliver policy, push fields) raises ``JetStreamConfigError``. Returns ``"created"``,
    ``"updated"`` or ``"unchanged"``.
    """
    info = await api.consumer_info(stream, spec.name)
    if info is None:
        result = await reconcile_consumer(api, stream, spec, if_exists="update", logger=logger)
        return result.action
    ack_policy = (info.get("config") or {}).get("ack_policy", "explicit")
    if ack_policy != "explicit":
        raise JetStreamConfigError(
            f"consumer {spec.name!r} on stream {stream!r} in {api.target} has ack_policy={ack_policy!r}: "
            "acking each message only after Airflow stored it needs ack_policy 'explicit'; use another consumer name"
        )
    kept = ConsumerSpec(values={k: v for k, v in spec.values.items() if k not in FIRST_START_ONLY}, path=spec.path)
    result = await reconcile_consumer(api, stream, kept, if_exists="update", logger=logger)
    return result.action


@dataclass
class Ticket:
    """A message handed to the caller and not yet settled: where to send its ack, how often it came."""

    sequence: int
    reply: str
    delivered: int
    delivery: Delivery


class DurablePuller:
    """Pulls a durable consumer and keeps every message it hands out alive until it is settled.

    At most ``max_in_flight`` messages are handed out and unsettled at any time: the caller's
    consumers have bounded queues. While a message is unsettled a ``+WPI`` renews it every
    ``ack_wait / 3`` seconds, so the server does not redeliver it while Airflow persists it.

    :param nc: a connected client (shared: the puller never closes it).
    :param api: the JetStream API (domain or prefix) of the stream.
    :param stream: stream name. :param consumer: durable consumer name.
    :param max_in_flight: unsettled messages at most. Default 256.
    :param ack_wait: the consumer's ack wait in seconds (drives the ``+WPI`` period). Default 30.
    :param expires: seconds one pull request waits on the server. Default 10: after a stop, what
        the server still sends to the last request comes back only after ``ack_wait``.
    :param heartbeat: idle heartbeat seconds; 3 missed heartbeats re-issue the request. Default 2.5.
    :param nak_delay: first redelivery delay after a failure; doubles per delivery. Default 1.
    :param nak_max_delay: the largest redelivery delay. Default 60.
    :param idle_delay: redelivery delay of a message nobody was listening for. Default 5.
    :param all_header_values: look repeated headers up with ``STREAM.MSG.GET`` (nats-py keeps the
        last value only). Default True; turned off after the first refused lookup.
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
        all_header_values: bool = True,
    ) -> None:
        if max_in_flight < 1:
            raise JetStreamConfigError(f"max_in_flight={max_in_flight} must be >= 1")
        self.nc, self.api, self.stream, self.consumer = nc, api, stream, consumer
        self.domain = domain_of(api.prefix)
        self.max_in_flight = max_in_flight
        self.ack_wait, self.expires, self.heartbeat = ack_wait, expires, heartbeat
        self.nak_delay, self.nak_max_delay, self.idle_delay = nak_delay, nak_max_delay, idle_delay
        self.all_header_values = all_header_values
        self.in_flight: dict[int, Ticket] = {}
        self.recently_acked: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.counts: collections.Counter[str] = collections.Counter()
        self._incoming: asyncio.Queue[Msg] = asyncio.Queue()
        self._room = asyncio.Event()
        self._room.set()
        self._requested = 0  # messages asked for by the open pull request and not yet received
        self._request_open = False
        self._last_sign = 0.0
        self._retry_at = 0.0
        self._backoff = 1.0
        self._sub: Any = None
        self._renewer: asyncio.Task[None] | None = None

    # -- pulling ----------------------------------------------------------------------------

    async def deliveries(self) -> AsyncIterator[Ticket]:
        """Messages in delivery order, each as a :class:`Ticket`, forever (or until an error).

        A message redelivered while still unsettled here is not handed out again (its ack
        subject is updated); one redelivered after it was acked is acked again.
        """
        inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(inbox, cb=self._on_msg, pending_msgs_limit=0, pending_bytes_limit=0)
        self._renewer = asyncio.create_task(self._renew(), name=f"jetstream-wpi[{self.stream}>{self.consumer}]")
        try:
            while True:
                await self._maybe_request(inbox)
                wait = self.heartbeat
                if not self._request_open and self._retry_at:
                    wait = min(wait, max(0.01, self._retry_at - time.monotonic()))
                try:
                    msg = await asyncio.wait_for(self._incoming.get(), timeout=wait)
                except asyncio.TimeoutError:
                    self._check_stall()
                    continue
                ticket = await self._accept(msg)
                if ticket is not None:
                    yield ticket
        finally:
            await self.stop()

    async def _on_msg(self, msg: Msg) -> None:
        self._last_sign = time.monotonic()
        self._incoming.put_nowait(msg)

    async def _maybe_request(self, inbox: str) -> None:
        while True:
            if self._request_open or time.monotonic() < self._retry_at:
                return
            room = self.max_in_flight - len(self.in_flight)
            if room > 0:
                break
            self._room.clear()  # full: wait until messages are settled
            await self._room.wait()
        body = {"batch": room, "expires": int(self.expires * 1e9), "idle_heartbeat": int(self.heartbeat * 1e9)}
        self._request_open, self._requested = True, room
        self._last_sign = time.monotonic()
        await self.nc.publish(
            f"{self.api.prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}", json.dumps(body).encode(), reply=inbox
        )

    def _check_stall(self) -> None:
        """No sign of the server for 3 heartbeats (a reconnect loses requests): ask again."""
        if self._request_open and time.monotonic() - self._last_sign > 3 * self.heartbeat:
            log.info("%s > %s: no sign of the server; pulling again", self.stream, self.consumer)
            self._request_open, self._requested = False, 0

    def _on_status(self, msg: Msg) -> None:
        status = (msg.headers or {}).get("Status", "")
        description = (msg.headers or {}).get("Description", "")
        if status == "100":
            return
        self._request_open, self._requested = False, 0
        if status == "409" and "Consumer Deleted" in description:
            raise JetStreamError(f"consumer {self.consumer!r} on stream {self.stream!r} was deleted while pulling")
        if status in ("404", "408") or (status == "409" and "Exceeded" not in description):
            self._backoff = 1.0
            return
        # 503 (no JetStream answered: a leaf cut off, a hub restarting) or a refused request: back off.
        log.warning(
            "%s > %s in %s: pull answered %s %s; retrying in %.0fs",
            self.stream, self.consumer, self.api.target, status or "?", description, self._backoff,
        )  # fmt: skip
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.expires)  # a relinked leaf is heard from soon

    async def _accept(self, msg: Msg) -> Ticket | None:
        meta = parse_ack_reply(msg.reply)
        if meta is None:
            self._on_status(msg)
            return None
        if self._requested > 0:
            self._requested -= 1
            if self._requested == 0:
                self._request_open = False
        self._backoff = 1.0
        held = self.in_flight.get(meta.sequence)
        if held is not None:  # redelivered while we still hold it: keep one copy, ack via the newest subject
            held.reply, held.delivered = msg.reply, meta.delivered
            self.counts["redelivered_in_flight"] += 1
            return None
        if meta.sequence in self.recently_acked:  # our ack was lost (a link cut): ack again, no second event
            await self.nc.publish(msg.reply, b"+ACK")
            self.counts["reacked"] += 1
            return None
        headers = None
        if msg.headers:
            headers = {k: [v] for k, v in msg.headers.items()}
            if self.all_header_values:
                headers = await self._all_header_values(meta.sequence) or headers
        delivery = Delivery(
            stream=self.stream,
            consumer=self.consumer,
            subject=msg.subject,
            sequence=meta.sequence,
            delivered=meta.delivered,
            timestamp_ns=meta.timestamp_ns,
            data=msg.data,
            headers=headers,
            domain=self.domain,
            pending=meta.pending,
        )
        ticket = Ticket(meta.sequence, msg.reply, meta.delivered, delivery)
        self.in_flight[meta.sequence] = ticket
        return ticket

    async def _all_header_values(self, sequence: int) -> dict[str, list[str]] | None:
        try:
            stored = await self.api.msg(self.stream, sequence)
        except (JetStreamError, nats.errors.Error) as err:
            log.warning("%s: cannot read repeated header values (%s); keeping the last value of each", self.stream, err)
            self.all_header_values = False
            return None
        return headers_from_api(stored) if stored else None

    # -- settling ---------------------------------------------------------------------------

    def redelivery_delay(self, delivered: int) -> float:
        """Seconds before a failed message comes back: ``nak_delay * 2**(delivered-1)``, at most ``nak_max_delay``."""
        return min(self.nak_max_delay, self.nak_delay * 2 ** max(0, delivered - 1))

    async def settle(self, items: Sequence[tuple[Ticket, Settlement]]) -> None:
        """Send each message's verdict, then flush once.

        ``ack`` → ``+ACK``; ``reject`` → ``+TERM`` (dead-lettering is the caller's, before this);
        ``fail`` → ``-NAK`` with the backoff delay; ``idle`` (nobody was listening) → ``-NAK`` with
        ``idle_delay``. Raises if the connection is closed: the server then redelivers.
        """
        for ticket, verdict in items:
            if verdict == "ack":
                body = b"+ACK"
                self.recently_acked[ticket.sequence] = None
                while len(self.recently_acked) > 10_000:
                    self.recently_acked.popitem(last=False)
            elif verdict == "reject":
                body = b"+TERM"
            else:
                delay = self.redelivery_delay(ticket.delivered) if verdict == "fail" else self.idle_delay
                body = b"-NAK " + json.dumps({"delay": int(delay * 1e9)}).encode()
            await self.nc.publish(ticket.reply, body)
            self.counts[verdict] += 1
            self.in_flight.pop(ticket.sequence, None)
        await self.nc.flush()
        self._room.set()

    async def _renew(self) -> None:
        """``+WPI`` every unsettled message every ``ack_wait / 3`` seconds."""
        period = max(0.1, self.ack_wait / 3)
        while True:
            await asyncio.sleep(period)
            if not self.in_flight or not self.nc.is_connected:
                continue
            with contextlib.suppress(nats.errors.Error):
                for ticket in list(self.in_flight.values()):
                    await self.nc.publish(ticket.reply, b"+WPI")
                self.counts["wpi"] += len(self.in_flight)

    async def stop(self) -> None:
        """Stop renewing; ``-NAK`` what is still unsettled so it comes back at once (best effort)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None
        if self.in_flight and self.nc.is_connected:
            with contextlib.suppress(Exception):
                for ticket in list(self.in_flight.values()):
                    await self.nc.publish(ticket.reply, b"-NAK")
                await self.nc.flush()
        self.in_flight.clear()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None


async def dead_letter(
    nc: Client,
    delivery: Delivery,
    *,
    dead_letter_stream: str,
    subject: str,
    reason: str,
    timeout: float = 5.0,
    extra_headers: Mapping[str, str] | None = None,
) -> int:
    """Copy ``delivery`` to ``dead_letter_stream`` on ``subject`` and wait for its PubAck; return its sequence there.

    The copy keeps the original headers (the last value of repeated ones) and adds ``Airflow-DLQ-Reason``
    and the origin (``Airflow-DLQ-Stream``, ``-Domain``, ``-Consumer``, ``-Subject``, ``-Sequence``,
    ``-Delivered``, ``-Timestamp``). ``Nats-Msg-Id`` is ``<domain>/<stream>/<sequence>``, so copying
    the same message again after a crash is deduplicated by the dead-letter stream. Raises
    ``JetStreamError`` when the stream did not store it.
    """
    headers = {k: v[-1] for k, v in (delivery.headers or {}).items() if v}
    headers.update(
        {
            "Airflow-DLQ-Reason": reason,
            "Airflow-DLQ-Stream": delivery.stream,
            "Airflow-DLQ-Domain": delivery.domain or "",
            "Airflow-DLQ-Consumer": delivery.consumer,
            "Airflow-DLQ-Subject": delivery.subject,
            "Airflow-DLQ-Sequence": str(delivery.sequence),
            "Airflow-DLQ-Delivered": str(delivery.delivered),
            "Airflow-DLQ-Timestamp": delivery.timestamp,
            "Nats-Msg-Id": f"{delivery.domain or '_'}/{delivery.stream}/{delivery.sequence}",
            "Nats-Expected-Stream": dead_letter_stream,
            **(extra_headers or {}),
        }
    )
    try:
        answer = await nc.request(subject, delivery.data, timeout=timeout, headers=headers)
    except nats.errors.NoRespondersError:
        raise JetStreamError(f"no stream stores {subject!r}: is {dead_letter_stream!r} missing?") from None
    except nats.errors.TimeoutError:
        raise JetStreamError(f"{dead_letter_stream!r} did not confirm {subject!r} within {timeout}s") from None
    ack = json.loads(answer.data or b"{}")
    if "error" in ack:
        raise JetStreamError(f"dead-letter stream {dead_letter_stream!r} refused the copy: {ack['error']}")
    return int(ack.get("seq", 0))
