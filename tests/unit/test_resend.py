"""The one resend rule (``core/resend.py``) as plain logic: what goes again, on which answers, after what pause,
for how long."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import nats.js.errors
import pytest

from airflow_provider_jetstream.core.errors import JetStreamNoLeaderError, JetStreamPublishError
from airflow_provider_jetstream.core.protocol import MSG_ID_HEADER
from airflow_provider_jetstream.core.resend import (
    RESEND_AFTER,
    may_resend,
    nothing_stores_now,
    pause_after,
    repeat,
    resend_after,
)


def refused(status: int | None, err_code: int | None) -> JetStreamPublishError:
    return JetStreamPublishError("refused", err_code, "refused", status)


def test_only_a_message_with_an_id_may_be_published_again() -> None:
    assert may_resend({MSG_ID_HEADER: "run-1/0"})
    assert not may_resend({MSG_ID_HEADER: ""})  # empty is not an id
    assert not may_resend({"other": "x"})
    assert not may_resend(None)


def test_answers_that_say_nothing_could_store_it_now() -> None:
    assert nothing_stores_now(refused(503, 10008))  # no leader for the stream
    assert nothing_stores_now(refused(None, 10210))  # too many atomic batches being staged
    assert nothing_stores_now(refused(None, 10208))  # a fast-ingest batch the server lost
    assert not nothing_stores_now(refused(400, 10054))  # a message over the size limit: a refusal
    assert not nothing_stores_now(refused(None, 10060))  # a wrong expected stream: a refusal
    assert not nothing_stores_now(None)
    # No responders: a stream's interest moving between a cluster's nodes; on one server, no stream listens.
    for nobody in (nats.js.errors.NoStreamResponseError(), nats.errors.NoRespondersError()):
        assert nothing_stores_now(nobody, cluster=True)
        assert not nothing_stores_now(nobody)
    assert not nothing_stores_now(JetStreamNoLeaderError("an API answer, not a publish's"))


def test_the_pause_doubles_from_a_quarter_second_up_to_two_seconds() -> None:
    assert [pause_after(sends) for sends in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert pause_after(10**9) == 2.0


def test_an_unacknowledged_message_goes_again_after_a_second_or_four_ack_latencies() -> None:
    assert resend_after(0.0) == RESEND_AFTER == 1.0
    assert resend_after(0.5) == 2.0


def test_the_loop_asks_again_while_the_answer_says_so_within_its_window() -> None:
    asked: list[float] = []

    async def twice_unavailable() -> str:
        asked.append(time.monotonic())
        if len(asked) <= 2:
            raise refused(503, 10008)
        return "stored"

    assert asyncio.run(repeat(twice_unavailable, again=nothing_stores_now, within=5, what="test")) == "stored"
    assert len(asked) == 3
    assert asked[1] - asked[0] >= 0.25 and asked[2] - asked[1] >= 0.5


def test_the_loop_gives_the_last_error_at_once_on_a_refusal_or_once_its_window_closes() -> None:
    calls = 0

    async def refusal() -> None:
        nonlocal calls
        calls += 1
        raise refused(400, 10054)

    with pytest.raises(JetStreamPublishError):
        asyncio.run(repeat(refusal, again=nothing_stores_now, within=5, what="test"))
    assert calls == 1

    calls = 0

    async def unavailable() -> None:
        nonlocal calls
        calls += 1
        raise refused(503, 10008)

    with pytest.raises(JetStreamPublishError):
        asyncio.run(repeat(unavailable, again=nothing_stores_now, within=1.0, what="test"))
    # 0.25 s, then 0.5 s; the next pause (1 s) would end past the window: no fourth ask.
    assert calls == 3
