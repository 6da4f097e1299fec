"""The ack floor of an ``ack_policy: all`` consumer (``core/consume/ack_floor.py``): which held message one ack
covers, when it may be sent, how many messages the next pull may ask for, which held messages are renewed."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.ack_floor import AckFloor
from airflow_provider_jetstream.core.consume.deliveries import Delivery, Ticket
from airflow_provider_jetstream.core.errors import JetStreamError
from tests.support.fakes import FakeClient

INFO = "$JS.leaf.API.CONSUMER.INFO.ORDERS.af"


def ticket(sequence: int, state: str = "out", consumer_sequence: int | None = None, delivered: int = 1) -> Ticket:
    dseq = sequence if consumer_sequence is None else consumer_sequence
    delivery = Delivery("ORDERS", "af", "orders.new", sequence, delivered, 0, b"")
    return Ticket(sequence, f"$JS.ACK.ORDERS.af.{delivered}.{sequence}.{dseq}.0.0", delivered, delivery, dseq, state)


def floor(*tickets: Ticket, info: dict | None = None) -> tuple[AckFloor, FakeClient]:
    """A floor over ``tickets`` held; the server's consumer info is ``info`` (default: exactly those held)."""
    nc = FakeClient()
    held = {t.seq: t for t in tickets}
    last = max((t.consumer_sequence for t in tickets), default=0)
    nc.answers[INFO] = info if info is not None else {"num_ack_pending": len(held), "delivered": {"consumer_seq": last}}
    api = JetStreamApi(nc, "$JS.leaf.API")  # type: ignore[arg-type]
    return AckFloor(api, "ORDERS", "af", held, collections.Counter()), nc


def nak(t: Ticket, verdict: str) -> bytes:
    return b"-NAK " + json.dumps({"delay": 1}).encode()


# -- target -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tickets", "target"),
    [
        ([], None),
        ([ticket(1, "out")], None),  # nothing settled
        ([ticket(1, "ack"), ticket(2, "ack"), ticket(3, "out")], 2),  # the settled prefix's highest
        ([ticket(1, "ack"), ticket(2, "reject")], 2),  # rejected counts as settled
        ([ticket(1, "ack"), ticket(2, "fail"), ticket(3, "ack")], 1),  # a failed one holds the floor
        ([ticket(1, "fail"), ticket(2, "ack")], None),
        ([ticket(1, "out"), ticket(2, "ack")], None),  # an unsettled one below holds it too
        ([ticket(3, "ack"), ticket(5, "ack"), ticket(9, "ack")], 9),  # sequences need not be contiguous
        # The ack moves the server's delivery floor to the target's consumer sequence: a held message above it
        # that was delivered earlier (the target is a redelivery) could then be neither acked nor naked.
        ([ticket(1, "ack", consumer_sequence=5), ticket(2, "out", consumer_sequence=2)], None),
        ([ticket(1, "ack", 1), ticket(2, "ack", 7), ticket(3, "out", 3)], 1),
        ([ticket(1, "ack", 5), ticket(2, "ack", 2), ticket(3, "out", 6)], 2),
    ],
)
def test_the_target_is_the_highest_settled_message_whose_ack_leaves_the_rest_ackable(
    tickets: list[Ticket], target: int | None
) -> None:
    ack_floor, _ = floor(*tickets)
    chosen = ack_floor.target()
    assert (chosen.seq if chosen else None) == target


@st.composite
def held_tickets(draw: st.DrawFn) -> list[Ticket]:
    """Held messages: increasing stream sequences, distinct consumer sequences in any order (redeliveries)."""
    count = draw(st.integers(0, 10))
    sequences = sorted(draw(st.sets(st.integers(1, 100), min_size=count, max_size=count)))
    dseqs = draw(st.permutations(range(1, count + 1)))
    states = draw(st.lists(st.sampled_from(["out", "ack", "reject", "fail"]), min_size=count, max_size=count))
    return [ticket(s, state, d) for s, d, state in zip(sequences, dseqs, states, strict=True)]


@settings(max_examples=300, deadline=None)
@given(held_tickets(), st.integers(0, 5))
def test_an_ack_of_the_target_never_covers_an_unsettled_message_nor_strands_one(
    tickets: list[Ticket], acked_dseq: int
) -> None:
    ack_floor, _ = floor(*tickets)
    ack_floor._acked_dseq = acked_dseq  # the server ignores acks and naks at or below this
    chosen = ack_floor.target()
    # the oracle: settled up to it, ackable, every held message above it still ackable afterwards; the highest such
    candidates = [
        t
        for t in tickets
        if all(u.state in ("ack", "reject") for u in tickets if u.seq <= t.seq)
        and t.consumer_sequence > acked_dseq
        and all(u.consumer_sequence > t.consumer_sequence for u in tickets if u.seq > t.seq)
    ]
    assert chosen is (max(candidates, key=lambda t: t.seq) if candidates else None)


# -- room and renewal -------------------------------------------------------------------------------------


def test_room_is_what_the_in_flight_bound_leaves() -> None:
    ack_floor, _ = floor(ticket(1, "ack"), ticket(2, "out"))
    assert ack_floor.room(5) == 3
    assert floor()[0].room(5) == 5


def test_full_of_held_messages_it_still_asks_for_the_failed_ones_to_come_back() -> None:
    # Else the floor never moves: the server sends redeliveries first, even at max_ack_pending.
    full = [ticket(1, "fail"), ticket(2, "ack"), ticket(3, "fail"), ticket(4, "out"), ticket(5, "ack")]
    assert floor(*full)[0].room(5) == 2
    settled = [ticket(1, "ack"), ticket(2, "ack"), ticket(3, "out"), ticket(4, "out"), ticket(5, "ack")]
    assert floor(*settled)[0].room(5) == 0  # nothing failed: wait for settlements
    # more unsettled and waiting than max_in_flight: no room
    crowded = [ticket(1, "fail"), ticket(2, "fail"), *[ticket(s, "out") for s in range(3, 8)]]
    assert floor(*crowded)[0].room(5) == 0


def test_a_failed_message_or_one_under_the_delivery_floor_is_not_renewed() -> None:
    ack_floor, _ = floor()
    ack_floor._acked_dseq = 4
    assert ack_floor.renews(ticket(9, "out", 5)) and ack_floor.renews(ticket(9, "ack", 5))
    assert not ack_floor.renews(ticket(9, "fail", 5))  # it waits out its nak delay
    assert not ack_floor.renews(ticket(9, "out", 4))  # the server takes no ack for it: let it expire


# -- settling and advancing -------------------------------------------------------------------------------


def test_settling_marks_stored_and_rejected_naks_the_failed_and_acks_the_floor_once() -> None:
    one, two, three, four = ticket(1), ticket(2), ticket(3), ticket(4)
    ack_floor, nc = floor(one, two, three, four)
    ack_floor.received(1)
    ack_floor.received(2)
    ack_floor.received(3)
    ack_floor.received(4)
    asyncio.run(ack_floor.settle([(one, "ack"), (two, "reject"), (three, "fail"), (four, "ack")], nak))
    assert [(s, t.state) for s, t in ack_floor.held.items()] == [(3, "fail"), (4, "ack")]
    # the nak of the failed one first, then one ack covering 1 and 2 (+TERM: the message at the floor was rejected)
    assert nc.published == [(three.reply, b'-NAK {"delay": 1}', ""), (two.reply, b"+TERM", "")]
    assert ack_floor.counts == collections.Counter({"ack": 2, "reject": 1, "fail": 1, "floor_acks": 1})
    assert (ack_floor._acked_through, ack_floor._acked_dseq) == (2, 2)


def test_a_settlement_of_a_message_no_longer_held_is_counted_and_ignored() -> None:
    held, stale = ticket(5), ticket(5)  # the same sequence, another delivery object (already under the floor)
    ack_floor, nc = floor(held)
    asyncio.run(ack_floor.settle([(stale, "fail"), (ticket(1), "ack")], nak))
    assert nc.published == [] and held.state == "out"
    assert ack_floor.counts == collections.Counter({"fail": 1, "ack": 1})


def test_the_floor_waits_while_the_server_holds_a_message_this_puller_does_not() -> None:
    one, two = ticket(1, "ack"), ticket(2, "out")
    # the server has 3 pending: one from a previous run, or lost on the way
    ack_floor, nc = floor(one, two, info={"num_ack_pending": 3, "delivered": {"consumer_seq": 2}})
    assert asyncio.run(ack_floor.advance()) is False
    assert nc.published == [] and ack_floor.counts["floor_waits"] == 1 and set(ack_floor.held) == {1, 2}
    nc.answers[INFO] = {"num_ack_pending": 2, "delivered": {"consumer_seq": 2}}
    assert asyncio.run(ack_floor.advance()) is True
    assert nc.published == [(one.reply, b"+ACK", "")] and set(ack_floor.held) == {2}
    assert nc.requests == [INFO, INFO]
    assert asyncio.run(ack_floor.advance()) is False  # nothing settled above: no request, no ack
    assert nc.requests == [INFO, INFO]


def test_a_delivery_gap_makes_the_floor_compare_with_the_server_again() -> None:
    one, two = ticket(1, "ack"), ticket(2, "ack")
    ack_floor, nc = floor(one)
    ack_floor.received(1)
    asyncio.run(ack_floor.advance())
    assert nc.requests == [INFO]  # the first look
    ack_floor.held[2] = two
    ack_floor.received(2)  # in order: still known to be in step
    nc.answers[INFO] = {"num_ack_pending": 1, "delivered": {"consumer_seq": 2}}
    asyncio.run(ack_floor.advance())
    assert nc.requests == [INFO]
    ack_floor.held[4] = ticket(4, "ack")
    ack_floor.received(4)  # consumer sequence 3 never arrived
    nc.answers[INFO] = {"num_ack_pending": 2, "delivered": {"consumer_seq": 4}}
    assert asyncio.run(ack_floor.advance()) is False  # the server holds 2, this puller 1
    assert nc.requests == [INFO, INFO] and ack_floor.counts["floor_waits"] == 1


def test_sync_drops_what_the_server_acked_itself_and_a_deleted_consumer_is_an_error() -> None:
    one, two, three = ticket(1), ticket(2), ticket(3)
    ack_floor, nc = floor(
        one, two, three, info={"ack_floor": {"stream_seq": 2, "consumer_seq": 2}, "num_ack_pending": 1,
                               "delivered": {"consumer_seq": 3}},
    )  # fmt: skip
    asyncio.run(ack_floor.sync())
    assert set(ack_floor.held) == {3}  # the server terminated 1 and 2 (removed from the stream)
    assert (ack_floor._acked_through, ack_floor._acked_dseq, ack_floor._synced) == (2, 2, True)
    nc.answers[INFO] = {"error": {"code": 404, "err_code": 10014, "description": "consumer not found"}}
    with pytest.raises(JetStreamError, match="consumer 'af' on stream 'ORDERS' was deleted while pulling"):
        asyncio.run(ack_floor.sync())


def test_a_redelivery_under_the_acked_floor_is_acked_again_only_when_safe() -> None:
    ack_floor, nc = floor(ticket(5, "out", consumer_sequence=10))
    ack_floor._acked_through = 4
    assert asyncio.run(ack_floor.covered("reply-6", 6, 11)) is False  # above the floor: a new message
    # below the floor, and every held message is above its consumer sequence: ack it again
    assert asyncio.run(ack_floor.covered("reply-3", 3, 9)) is True
    assert nc.published == [("reply-3", b"+ACK", "")] and ack_floor.counts["reacked"] == 1
    assert ack_floor._acked_dseq == 9
    # a held message delivered before it: acking would strand that one; the next floor ack covers it
    assert asyncio.run(ack_floor.covered("reply-2", 2, 12)) is True
    assert nc.published == [("reply-3", b"+ACK", "")] and ack_floor.counts["reacked"] == 1
