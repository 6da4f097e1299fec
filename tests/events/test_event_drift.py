"""The event drift check (``JetStreamHook.event_drift``): a consumer's ack floor against the events Airflow stored."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_jetstream.core.errors import SpecErrors
from airflow_provider_jetstream.core.status.event_drift import event_sequences
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from tests.support.natsutil import acked_through, connect, consumer_state, leaf_stream, publish, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import message_trigger
from tests.support.waiting import eventually


def test_the_drift_check_finds_a_message_acked_without_a_stored_event(hub_leaf, hub_conn) -> None:
    """Two watchers on one consumer: while one asset's events are stored and the other's partly, nothing drifts
    (stored, not acked: pending); once everything is stored and acked, nothing drifts; a message another client
    pulled and acked on the trigger's consumer is reported lost, unless it is not for the watcher."""
    stream = unique("drift").upper()
    url = hub_leaf.url("leaf")
    hook = JetStreamHook(hub_conn, domain="leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream)
        await publish(url, f"{stream}.x", [json.dumps({"n": n}).encode() for n in range(1, 11)])
        runner = Triggerer()
        for tid in (1, 2):
            runner.start(tid, message_trigger(hub_conn, stream))
        try:
            await runner.wait_fired(20)
            runner.persist(lambda f: f.trigger_id == 1 or f.event.payload["seq"] <= 5)
            await eventually(lambda: consumer_state(url, stream, "af_events"), lambda i: acked_through(i) == 5)
            first = [{"extra": {"payload": f.event.payload}} for f in runner.fired if f.trigger_id == 1]
            check = await hook.aevent_drift(stream, "af_events", event_sequences(first))
            assert (check.drifted, check.ack_floor, check.lost, check.pending_stored) == (False, 5, [], 5)
            runner.persist()
            await eventually(lambda: consumer_state(url, stream, "af_events"), lambda i: acked_through(i) == 10)
            check = await hook.aevent_drift(stream, "af_events", event_sequences(first))
            assert (check.drifted, check.ack_floor, check.pending_stored, check.duplicates) == (False, 10, 0, {})
        finally:
            await runner.stop()
        # The triggers stopped; another client pulls from their consumer and acks what it gets.
        await eventually(lambda: consumer_state(url, stream, "af_events"), lambda i: i["num_waiting"] == 0)
        await publish(url, f"{stream}.x", [b'{"n": 11}'])
        nc = await connect(url)
        try:
            taken = await nc.jetstream().pull_subscribe_bind("af_events", stream)
            [msg] = await taken.fetch(1, timeout=10)
            await msg.ack_sync()
        finally:
            await nc.close()
        check = await hook.aevent_drift(stream, "af_events", event_sequences(first))
        assert (check.drifted, check.ack_floor, check.lost) == (True, 11, [11])
        assert "1 message(s) acked without a stored asset event: 11" in check.reason
        assert check.to_xcom()["lost"] == [11]
        elsewhere = await hook.aevent_drift(stream, "af_events", event_sequences(first), subjects=[f"{stream}.y"])
        assert (elsewhere.drifted, elsewhere.lost) == (False, [])  # not a message this watcher takes
        # A position recorded before the consumer was reset (above its floor) is drift too.
        moved = await hook.aevent_drift(stream, "af_events", list(range(1, 12)), position={"stream_seq": 40})
        assert moved.drifted and "the recorded position 40 is above the ack floor 11" in moved.reason

    asyncio.run(scenario())


def test_the_drift_check_refuses_bad_input_before_asking_the_server(hub_conn) -> None:
    hook = JetStreamHook(hub_conn, domain="leaf")
    with pytest.raises(SpecErrors, match=r"stored_sequences\[1\]='x' is not allowed"):
        hook.event_drift("S", "c", [1, "x"])
    with pytest.raises(SpecErrors, match=r"position=.* is not allowed"):
        hook.event_drift("S", "c", [1], position=[40])


def test_event_sequences_reads_message_and_batch_events_in_every_form() -> None:
    class Stored:  # the shape of an asset event a task reads from ``inlet_events``
        def __init__(self, payload: dict) -> None:
            self.extra = {"payload": payload}

    batch = {"stream": "S", "count": 2, "first_seq": 4, "last_seq": 6, "messages": [{"seq": 4}, {"seq": 6}]}
    kv = {"bucket": "B", "key": "k", "revision": 9}
    events = [Stored({"seq": 1}), {"extra": {"payload": {"seq": 2}}}, {"seq": 3}, Stored(batch), {"extra": {}}, kv]
    assert event_sequences(events) == [1, 2, 3, 4, 6, 9]
