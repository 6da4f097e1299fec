"""The ack floor of an ``ack_policy: all`` consumer: which held message one ack covers, and when it may be sent."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.deliveries import Settlement, Ticket
from airflow_provider_jetstream.core.errors import JetStreamError
from airflow_provider_jetstream.core.protocol import ACK, TERM

# What nats-server does with an AckAll consumer (server/consumer.go):
# - +ACK of stream sequence S (processAckMsg, case AckAll) drops every pending message <= S and sets the
#   ack floor to S and to the delivery (consumer) sequence of that ack; an ack or -NAK whose consumer
#   sequence is at or below that floor is ignored (processAckMsg, processNak).
# - +TERM is processed as an ack (processTerm calls processAckMsg): it acks everything <= S too, so a
#   rejected message is only terminated as the floor.
# - -NAK (with delay) and +WPI (progressUpdate) act on that one pending message only.
# - getNextMsg sends redeliveries before it checks max_ack_pending: a failed message comes back even
#   when the consumer is full of messages held behind it.
# - A pending message removed from the stream is terminated by the server itself (which, under AckAll,
#   acks those below it); one past max_deliver is dropped from pending, never redelivered.


class AckFloor:
    """The floor of the messages a puller holds on an ``ack_policy: all`` consumer, and the ``+ACK`` that moves it.

    Kept by :class:`~airflow_provider_jetstream.core.consume.durable.DurablePuller` for such a consumer.
    The floor is the highest stream sequence S such that every held message up to S is settled as
    stored or rejected (ticket ``state`` ``ack`` / ``reject``). A failed one (``fail``) holds it until
    it comes back and is settled. The floor is acked only while the server's pending messages are
    exactly the held ones (see :meth:`sync`).

    :param api: the JetStream API of the stream (its client sends the acks).
    :param stream: stream name.
    :param consumer: durable consumer name.
    :param held: the puller's held tickets by stream sequence (shared: an ack of the floor removes
        the ones it covers).
    :param counts: the puller's counters (``floor_acks``, ``floor_waits``, ``reacked``, verdicts).
    """

    def __init__(
        self,
        api: JetStreamApi,
        stream: str,
        consumer: str,
        held: dict[int, Ticket],
        counts: collections.Counter[str],
    ) -> None:
        self.nc, self.api, self.stream, self.consumer = api.nc, api, stream, consumer
        self.held = held
        self.counts = counts
        self._lock = asyncio.Lock()
        self._synced = False  # the server's pending messages are known to be exactly the held ones
        self._last_dseq = 0  # the highest consumer (delivery) sequence received
        self._acked_through = 0  # stream sequence of the last floor ack sent
        self._acked_dseq = 0  # its consumer sequence: the server ignores acks and naks at or below it

    @property
    def acked_through(self) -> int:
        """The stream sequence of the last floor ack sent: every message up to it is acked (0: none yet)."""
        return self._acked_through

    # -- deliveries -------------------------------------------------------------------------

    def received(self, consumer_sequence: int) -> None:
        """Note a delivery's consumer sequence; a gap means the server may hold one not held here."""
        if consumer_sequence != self._last_dseq + 1:
            self._synced = False  # a delivery never reached us (a link cut)
        self._last_dseq = max(self._last_dseq, consumer_sequence)

    async def covered(self, reply: str, sequence: int, consumer_sequence: int) -> bool:
        """Whether a (re)delivery is below the floor acked already; if so it is acked again when that is safe."""
        if sequence > self._acked_through:
            return False
        # Covered by a floor ack that was lost. Acking it again moves the server's delivery floor to this
        # redelivery's (high) consumer sequence, and the server ignores acks and naks at or below that floor
        # (processAckMsg / processNak): only do it when every held message is above it; else the next floor
        # ack covers it.
        if all(t.consumer_sequence > consumer_sequence for t in self.held.values()):
            await self.nc.publish(reply, ACK)
            self._acked_dseq = max(self._acked_dseq, consumer_sequence)
            self.counts["reacked"] += 1
        return True

    def room(self, max_in_flight: int) -> int:
        """How many messages the next pull may ask for, ``max_in_flight`` held messages at most."""
        room = max_in_flight - len(self.held)
        if room > 0:
            return room
        # Full of held messages while failed ones wait for their redelivery: ask for them anyway, or the
        # floor never moves. The server sends redeliveries before new messages, and sends them even at
        # max_ack_pending (getNextMsg checks max pending after the redelivery queue); at most
        # max_in_flight of the held ones are still unsettled with the watchers.
        waiting = sum(1 for t in self.held.values() if t.state == "fail")
        unsettled = sum(1 for t in self.held.values() if t.state == "out")
        return waiting if waiting and unsettled + waiting <= max_in_flight else 0

    def renews(self, ticket: Ticket) -> bool:
        """Whether a held message gets a ``+WPI``."""
        # A failed one waits out its nak delay. One the server would no longer take an ack or nak for
        # (see target) is let expire: it comes back with a new consumer sequence.
        return ticket.state != "fail" and ticket.consumer_sequence > self._acked_dseq

    # -- settling ---------------------------------------------------------------------------

    async def settle(
        self, items: Sequence[tuple[Ticket, Settlement]], nak: Callable[[Ticket, Settlement], bytes]
    ) -> None:
        """Mark stored and rejected messages for the floor, ``-NAK`` the others at once (body ``nak(ticket,
        verdict)``), then ack the floor if it can move. The caller flushes."""
        for ticket, verdict in items:
            self.counts[verdict] += 1
            if self.held.get(ticket.seq) is not ticket:
                continue  # already under the server's ack floor
            if verdict in ("ack", "reject"):
                ticket.state = verdict
            else:
                ticket.state = "fail"
                await self.nc.publish(ticket.reply, nak(ticket, verdict))
        await self.advance()

    def target(self) -> Ticket | None:
        """The held message to ack: the highest of the settled prefix whose ack the server will honour
        and that leaves every held message above it ackable."""
        held = sorted(self.held.values(), key=lambda t: t.seq)
        prefix = 0
        while prefix < len(held) and held[prefix].state in ("ack", "reject"):
            prefix += 1
        # The ack moves the server's delivery floor to the target's consumer sequence: a held message above
        # it delivered earlier (the target is a redelivery) could then be neither acked nor naked.
        above = min((t.consumer_sequence for t in held[prefix:]), default=None)
        for ticket in reversed(held[:prefix]):
            if (above is None or ticket.consumer_sequence < above) and ticket.consumer_sequence > self._acked_dseq:
                return ticket
            above = ticket.consumer_sequence if above is None else min(above, ticket.consumer_sequence)
        return None

    async def advance(self) -> bool:
        """Ack the floor (one ``+ACK``, ``+TERM`` when the message at the floor was rejected) when it can
        move and the server holds nothing this puller does not; True if it was acked."""
        async with self._lock:
            if self.target() is None:
                return False
            if not self._synced:
                await self.sync()
                if not self._synced:
                    self.counts["floor_waits"] += 1
                    return False
            target = self.target()
            if target is None:
                return False
            await self.nc.publish(target.reply, TERM if target.state == "reject" else ACK)
            for seq in [s for s in self.held if s <= target.seq]:
                del self.held[seq]
            self._acked_through = target.seq
            self._acked_dseq = max(self._acked_dseq, target.consumer_sequence)
            self.counts["floor_acks"] += 1
            return True

    async def sync(self) -> None:
        """Compare with the server: the floor may only be acked when the server's pending messages are
        exactly the ones held here (none from a previous run, none lost on the way), i.e. it counts as
        many and delivered nothing after the last delivery received here."""
        info = await self.api.consumer_info(self.stream, self.consumer)
        if info is None:
            raise JetStreamError(f"consumer {self.consumer!r} on stream {self.stream!r} was deleted while pulling")
        floor = info.get("ack_floor") or {}
        through = int(floor.get("stream_seq", 0))
        for seq in [s for s in self.held if s <= through]:
            del self.held[seq]  # the server acknowledged it already (it terminated a removed message)
        self._acked_through = max(self._acked_through, through)
        self._acked_dseq = max(self._acked_dseq, int(floor.get("consumer_seq", 0)))
        delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
        if not self._last_dseq:
            self._last_dseq = delivered  # first look: older deliveries are acked or counted in num_ack_pending
        self._synced = int(info.get("num_ack_pending", 0)) == len(self.held) and delivered == self._last_dseq
