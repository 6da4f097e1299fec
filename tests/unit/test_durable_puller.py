"""The durable puller's pure parts (``core/consume/durable.py``): the redelivery delay, what ``settle`` sends for
each verdict, and what a pull status means for the consumer."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.deliveries import Delivery, Ticket
from airflow_provider_jetstream.core.consume.durable import DurablePuller
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamError
from airflow_provider_jetstream.core.protocol import pull_status
from tests.support.fakes import FakeClient


def puller(**kwargs) -> tuple[DurablePuller, FakeClient]:
    nc = FakeClient()
    api = JetStreamApi(nc, "$JS.leaf.API")  # type: ignore[arg-type]
    return DurablePuller(nc, api, "ORDERS", "af", **kwargs), nc  # type: ignore[arg-type]


def ticket(sequence: int, delivered: int = 1) -> Ticket:
    delivery = Delivery("ORDERS", "af", "orders.new", sequence, delivered, 0, b"")
    return Ticket(sequence, f"$JS.ACK.ORDERS.af.{delivered}.{sequence}.{sequence}.0.0", delivered, delivery, sequence)


def nak_delay_ns(body: bytes) -> int:
    verb, _, rest = body.partition(b" ")
    assert verb == b"-NAK"
    return json.loads(rest)["delay"]


def test_max_in_flight_must_allow_one_message() -> None:
    with pytest.raises(JetStreamConfigError, match="max_in_flight=0 must be >= 1"):
        puller(max_in_flight=0)


@pytest.mark.parametrize(
    ("delivered", "delay"), [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (50, 60.0)]
)
def test_a_failed_message_comes_back_after_a_delay_doubling_per_delivery_up_to_the_cap(
    delivered: int, delay: float
) -> None:
    assert puller(nak_delay=1.0, nak_max_delay=60.0)[0].redelivery_delay(delivered) == delay


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 10), st.floats(0.01, 600), st.integers(1, 200))
def test_the_redelivery_delay_never_shrinks_and_never_passes_the_cap(first: float, cap: float, delivered: int) -> None:
    dp, _ = puller(nak_delay=first, nak_max_delay=cap)
    assert dp.redelivery_delay(delivered) <= cap
    assert dp.redelivery_delay(delivered + 1) >= dp.redelivery_delay(delivered)


def test_settle_sends_each_verdict_then_flushes_once() -> None:
    dp, nc = puller(nak_delay=1.0, nak_max_delay=60.0, idle_delay=5.0)
    tickets = [ticket(1), ticket(2), ticket(3, delivered=3), ticket(4)]
    dp.in_flight.update({t.seq: t for t in tickets})
    dp._room.clear()
    verdicts = list(zip(tickets, ["ack", "reject", "fail", "idle"], strict=True))
    asyncio.run(dp.settle(verdicts))
    sent = {reply: body for reply, body, _ in nc.published}
    assert sent[tickets[0].reply] == b"+ACK"
    assert sent[tickets[1].reply] == b"+TERM"  # dead-lettering is the caller's, before this
    assert nak_delay_ns(sent[tickets[2].reply]) == 4_000_000_000  # third delivery: 1 s * 2**2
    assert nak_delay_ns(sent[tickets[3].reply]) == 5_000_000_000  # nobody was listening: idle_delay
    assert [reply for reply, _, _ in nc.published] == [t.reply for t in tickets]  # in order
    assert nc.flushes == 1
    assert dp.in_flight == {} and dp._room.is_set()  # room for the next pull
    assert list(dp.recently_acked) == [1]  # a redelivery of it (a lost ack) is acked again, not fired again
    assert dict(dp.counts) == {"ack": 1, "reject": 1, "fail": 1, "idle": 1}


def test_recently_acked_keeps_the_last_ten_thousand() -> None:
    dp, nc = puller()
    tickets = [ticket(s) for s in range(1, 10_003)]
    asyncio.run(dp.settle([(t, "ack") for t in tickets]))
    assert len(dp.recently_acked) == 10_000 and next(iter(dp.recently_acked)) == 3
    assert len(nc.published) == 10_002


def test_with_ack_all_stored_messages_wait_for_the_floor_and_failures_are_naked_at_once() -> None:
    dp, nc = puller(ack_all=True, nak_delay=0.5)
    nc.answers["$JS.leaf.API.CONSUMER.INFO.ORDERS.af"] = {"num_ack_pending": 3, "delivered": {"consumer_seq": 3}}
    one, two, three = ticket(1), ticket(2, delivered=2), ticket(3)
    dp.in_flight.update({1: one, 2: two, 3: three})
    for t in (one, two, three):
        dp.floor.received(t.consumer_sequence)  # type: ignore[union-attr]
    asyncio.run(dp.settle([(one, "ack"), (two, "fail"), (three, "ack")]))
    assert [(reply, body) for reply, body, _ in nc.published] == [
        (two.reply, b'-NAK {"delay": 1000000000}'),  # second delivery: 0.5 s * 2
        (one.reply, b"+ACK"),  # the floor: 1 only, 2 failed and holds it
    ]
    assert set(dp.in_flight) == {2, 3} and (two.state, three.state) == ("fail", "ack")
    assert nc.flushes == 1 and dp.recently_acked == {}


def _on(dp: DurablePuller, code: str, description: str = "") -> None:
    """The status reaches the engine, then the puller acts on what it read (as its loop does)."""
    status = pull_status({"Status": code, "Description": description})
    assert status is not None
    dp.requests.react(status)
    asyncio.run(dp._interrupted())


def test_heartbeats_and_ended_requests_go_on_and_an_ended_request_resets_the_pause() -> None:
    dp, _ = puller(expires=10.0)
    _on(dp, "503")
    _on(dp, "503")
    assert dp.requests.backoff._next == 4.0
    _on(dp, "100", "Idle Heartbeat")
    assert dp.requests.backoff._next == 4.0
    for code, description in (("404", "No Messages"), ("408", "Request Timeout"), ("409", "Leadership Change")):
        dp.requests.backoff.next()
        _on(dp, code, description)
        assert dp.requests.backoff._next == 1.0


@pytest.mark.parametrize(
    ("code", "description"), [("503", ""), ("409", "Server Shutdown"), ("409", "Exceeded MaxWaiting")]
)
def test_retry_after_pauses_pulling_doubling_up_to_the_request_expiry(code: str, description: str) -> None:
    dp, _ = puller(expires=5.0)
    for pause in (1.0, 2.0, 4.0, 5.0, 5.0):  # a relinked leaf is heard from soon: the cap is the request's expiry
        before = time.monotonic()
        _on(dp, code, description)
        assert before + pause <= dp.requests.retry_at <= time.monotonic() + pause


def test_a_deleted_consumer_or_a_refused_pull_ends_the_puller_with_the_reason() -> None:
    dp, nc = puller()
    nc.answers["$JS.leaf.API.CONSUMER.INFO.ORDERS.af"] = {"error": {"code": 404, "err_code": 10014}}
    with pytest.raises(JetStreamError, match="consumer 'af' on stream 'ORDERS' was deleted while pulling"):
        _on(dp, "409", "Consumer Deleted")
    for code, description in (
        ("409", "Exceeded MaxRequestBatch of 10"),
        ("409", "Consumer is push based"),
        ("400", "Bad Request"),
    ):
        dp.requests.failure = None
        with pytest.raises(JetStreamError) as refused:
            _on(dp, code, description)
        assert str(refused.value) == (
            f"consumer 'af' on stream 'ORDERS' in domain 'leaf': the server refused the pull: {code} {description}"
        )
    assert dp.requests.retry_at == 0.0  # none of them is retried
