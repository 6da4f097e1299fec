"""The pull subscription's accounting (``core/read/pull.py``): what the requests still owe, what each status
settles, when requests count as stalled, and the retry pause."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.protocol import (
    FATAL,
    HEARTBEAT,
    REQUEST_DONE,
    RESUME,
    RETRY_AFTER,
    PullStatus,
    pull_status,
)
from airflow_provider_jetstream.core.read.pull import STALL_HEARTBEATS, PullRequests, PullSubscription
from airflow_provider_jetstream.core.resend import Backoff
from tests.support.fakes import FakeClient

SUBJECT = "$JS.leaf.API.CONSUMER.MSG.NEXT.ORDERS.reader"


class Pulls(PullSubscription):
    """The subscription, with statuses given as nats-py's header dicts."""

    def status(self, headers: dict[str, str] | None) -> PullStatus | None:
        return self.react(pull_status(headers))


def requests(pipelined: bool = True, max_bytes: int | None = None) -> tuple[Pulls, FakeClient]:
    nc = FakeClient()
    api = JetStreamApi(nc, "$JS.leaf.API")  # type: ignore[arg-type]
    pulls = Pulls(api, "ORDERS", "reader", lambda *frame: None, PullRequests(10.0, 2.5, max_bytes, pipelined))
    return pulls, nc


def status(code: str, description: str = "", **headers: str) -> dict[str, str]:
    return {"Status": code, "Description": description, **headers}


def test_a_request_asks_the_consumer_for_a_batch_on_the_inbox_and_counts_it_owed() -> None:
    pulls, nc = requests(max_bytes=1 << 20)
    asyncio.run(pulls.ask(100))
    asyncio.run(pulls.ask(50))
    assert pulls.outstanding == 150
    assert [(subject, reply) for subject, _, reply in nc.published] == [(SUBJECT, "_INBOX.fake")] * 2
    assert json.loads(nc.published[0][1]) == {
        "batch": 100,
        "expires": 10_000_000_000,
        "idle_heartbeat": 2_500_000_000,
        "max_bytes": 1 << 20,
    }
    plain, nc = requests()
    asyncio.run(plain.ask(1))
    assert "max_bytes" not in json.loads(nc.published[0][1])  # not asked for, not sent (strict API servers)


def test_received_messages_are_no_longer_owed_and_never_below_zero() -> None:
    pulls, _ = requests()
    asyncio.run(pulls.ask(10))
    pulls.received()
    pulls.received(4)
    assert pulls.outstanding == 5
    pulls.received(9)
    assert pulls.outstanding == 0


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_message_that_is_not_a_status_settles_nothing(pipelined: bool) -> None:
    pulls, _ = requests(pipelined)
    asyncio.run(pulls.ask(10))
    for headers in (None, {}, {"Nats-Msg-Id": "x"}):
        assert pulls.status(headers) is None
    assert pulls.outstanding == 10


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_heartbeat_is_a_sign_of_the_server_and_ends_no_request(pipelined: bool) -> None:
    pulls, _ = requests(pipelined)
    asyncio.run(pulls.ask(10))
    pulls.last_sign = 0.0
    seen = pulls.status(status("100", "Idle Heartbeat", **{"Nats-Last-Stream": "41"}))
    assert seen is not None and (seen.outcome, seen.last_stream_seq) == (HEARTBEAT, 41)
    assert pulls.outstanding == 10 and pulls.last_sign > 0


@pytest.mark.parametrize(
    ("headers", "outcome", "pipelined_owes"),
    [
        # a request that ended saying what it did not deliver: only that is released
        (status("408", "Request Timeout", **{"Nats-Pending-Messages": "7"}), REQUEST_DONE, 23),
        (status("409", "Batch Completed", **{"Nats-Pending-Messages": "3"}), REQUEST_DONE, 27),
        (status("409", "Message Size Exceeds MaxBytes", **{"Nats-Pending-Messages": "30"}), REQUEST_DONE, 0),
        # ended without saying: the count is left alone (a stall tells)
        (status("404", "No Messages"), REQUEST_DONE, 30),
        (status("408", "Request Timeout"), REQUEST_DONE, 30),
        # every request is over
        (status("409", "Leadership Change"), REQUEST_DONE, 0),
        # not a request's end
        (status("503"), RETRY_AFTER, 30),
        (status("409", "Exceeded MaxWaiting"), RETRY_AFTER, 30),
        (status("409", "Consumer Deleted"), RESUME, 30),
        (status("409", "Exceeded MaxRequestBatch of 10"), FATAL, 30),
    ],
)
def test_what_a_status_settles(headers: dict[str, str], outcome: str, pipelined_owes: int) -> None:
    for pipelined, owes in ((True, pipelined_owes), (False, 0)):  # one request at a time: any status ends it
        pulls, _ = requests(pipelined)
        asyncio.run(pulls.ask(10))
        asyncio.run(pulls.ask(20))
        seen = pulls.status(headers)
        assert seen is not None and seen.outcome == outcome
        assert pulls.outstanding == owes, (pipelined, headers)


def test_forget_counts_nothing_owed() -> None:
    pulls, _ = requests()
    asyncio.run(pulls.ask(10))
    pulls.forget()
    assert pulls.outstanding == 0 and not pulls.stalled(pulls.last_sign + 3600)


def test_requests_stall_after_three_silent_heartbeats_while_messages_are_owed() -> None:
    pulls, _ = requests()
    assert STALL_HEARTBEATS == 3
    asyncio.run(pulls.ask(5))
    sign = pulls.last_sign
    assert pulls.silence(sign + 4.0) == pytest.approx(4.0)
    assert not pulls.stalled(sign + 7.5)  # three heartbeats of 2.5 s: not yet
    assert pulls.stalled(sign + 7.6)
    pulls.received(1)  # a sign of the server: the silence starts again
    assert not pulls.stalled(pulls.last_sign + 7.5) and pulls.stalled(pulls.last_sign + 7.6)
    pulls.received(4)  # nothing owed: silence is no stall
    assert not pulls.stalled(pulls.last_sign + 3600)


def test_any_status_is_a_sign_of_the_server() -> None:
    pulls, _ = requests()
    asyncio.run(pulls.ask(5))
    pulls.last_sign = 0.0
    pulls.status(status("503"))
    assert pulls.last_sign > 0
    pulls.last_sign = 0.0
    pulls.received(0)
    assert pulls.last_sign > 0


operations = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.integers(1, 1000)),
        st.tuples(st.just("received"), st.integers(0, 1000)),
        st.tuples(st.just("done"), st.one_of(st.none(), st.integers(0, 1000))),
        st.tuples(st.just("leadership"), st.none()),
        st.tuples(st.just("heartbeat"), st.none()),
        st.tuples(st.just("forget"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(operations, st.booleans())
def test_what_is_owed_is_never_negative_nor_more_than_was_asked(ops: list, pipelined: bool) -> None:
    pulls, _ = requests(pipelined)
    owed = 0  # the model
    for op, n in ops:
        if op == "ask":
            asyncio.run(pulls.ask(n))
            owed += n
        elif op == "received":
            pulls.received(n)
            owed = max(0, owed - n)
        elif op == "done":
            pulls.status(status("408", "Request Timeout", **({} if n is None else {"Nats-Pending-Messages": str(n)})))
            if not pipelined:
                owed = 0
            elif n is not None:
                owed = max(0, owed - n)
        elif op == "leadership":
            pulls.status(status("409", "Leadership Change"))
            owed = 0
        elif op == "heartbeat":
            pulls.status(status("100", "Idle Heartbeat"))
        else:
            pulls.forget()
            owed = 0
        assert pulls.outstanding == owed >= 0


def test_backoff_doubles_up_to_its_cap_and_starts_over_once_data_flows() -> None:
    backoff = Backoff(first=1.0, cap=10.0)
    assert [backoff.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert [backoff.next() for _ in range(2)] == [1.0, 2.0]
    assert [Backoff().next() for _ in range(1)] == [1.0]
    default = Backoff()
    assert [default.next() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
