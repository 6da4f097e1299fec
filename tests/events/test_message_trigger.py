"""``JetStreamMessageTrigger`` on a real hub + leaf, driven by Airflow 3.3's own SharedStreamManager."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger
from tests.support.natsutil import (
    acked_through,
    connect,
    connection_count,
    consumer_state,
    leaf_stream,
    publish,
    publish_raw_headers,
    unique,
)
from tests.support.triggerer import Triggerer, published_so_far_reached_the_server
from tests.support.triggers import message_trigger, rebuild
from tests.support.waiting import eventually, scaled


def test_events_carry_the_message_and_nothing_is_acked_before_every_watcher_stored_it(hub_leaf, hub_conn) -> None:
    stream = unique("ev").upper()
    leaf = hub_leaf.leaves["leaf"]
    user, password = USERS["ACC"]

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        await publish(hub_leaf.url("leaf"), f"{stream}.a", [b'{"batch": 7}', "plain text é".encode(), b"\xff\x00"])
        repeated = [("X-Tag", "one"), ("X-Tag", "two"), ("K", "v")]
        publish_raw_headers("127.0.0.1", leaf.port, user, password, f"{stream}.b", repeated, b"4")
        runner = Triggerer()
        for tid in (1, 2, 3):  # three watchers with identical kwargs: one group
            runner.start(tid, message_trigger(hub_conn, stream))
        try:
            fired = await runner.wait_fired(12)
            by_seq = {f.event.payload["seq"]: f.event.payload for f in fired if f.trigger_id == 1}
            assert by_seq[1]["encoding"] == "json" and by_seq[1]["data"] == {"batch": 7}
            assert by_seq[1]["subject"] == f"{stream}.a" and by_seq[1]["domain"] == "leaf"
            assert (by_seq[2]["encoding"], by_seq[2]["data"]) == ("text", "plain text é")
            assert (by_seq[3]["encoding"], by_seq[3]["data"]) == ("base64", "/wA=")
            assert by_seq[4]["headers"] == {"X-Tag": ["one", "two"], "K": ["v"]}
            assert by_seq[4]["timestamp"].startswith("20") and by_seq[4]["delivered"] == 1
            assert all(json.loads(json.dumps(p)) == p for p in by_seq.values())  # it lands in asset_event.extra

            info = await consumer_state(hub_leaf.url("leaf"), stream, "af_events")
            assert (info["num_ack_pending"], acked_through(info)) == (4, 0)
            runner.persist(lambda f: f.trigger_id in (1, 2))  # two of three watchers stored theirs
            # A wrong early ack would go out on the watchers' connection as this persist is handled: once it
            # has reached the server, the check below is exact.
            await published_so_far_reached_the_server(hub_conn)
            info = await consumer_state(hub_leaf.url("leaf"), stream, "af_events")
            assert (info["num_ack_pending"], acked_through(info)) == (4, 0)
            runner.persist(lambda f: f.trigger_id == 3 and f.event.payload["seq"] <= 2)
            info = await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 2
            )
            assert (info["num_ack_pending"], acked_through(info)) == (2, 2)
            runner.persist()
            info = await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 4
            )
            assert info["num_ack_pending"] == 0 and info["num_redelivered"] == 0
        finally:
            await runner.stop()

    asyncio.run(scenario())


def test_a_reject_dead_letters_with_the_reason_then_terminates(hub_leaf, hub_conn) -> None:
    stream = unique("rej").upper()
    dlq = f"{stream}_DLQ"

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream, dlq)
        await publish(hub_leaf.url("leaf"), f"{stream}.x", [b"not json", b'{"ok": 1}'])
        nc = await connect(hub_leaf.url("leaf"))
        terminated: list[dict] = []

        async def on_term(msg) -> None:
            terminated.append(json.loads(msg.data))

        await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.af_events", cb=on_term)
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream, decode="json", dead_letter_stream=dlq))
        try:
            fired = await runner.wait_fired(1)
            assert [f.event.payload["seq"] for f in fired] == [2]
            await eventually(lambda: len(terminated), lambda n: n == 1)
            assert terminated[0]["stream_seq"] == 1
            copy = await nc.jetstream().get_msg(dlq, 1)
            assert copy.data == b"not json"
            assert copy.headers["Airflow-DLQ-Reason"] == "rejected by a watcher"
            assert copy.headers["Airflow-DLQ-Sequence"] == "1" and copy.headers["Airflow-DLQ-Stream"] == stream
            assert copy.subject == f"{dlq}.{stream}.af_events"
            info = await consumer_state(hub_leaf.url("leaf"), stream, "af_events")
            assert info["num_ack_pending"] == 1  # the JSON message waits for its persist
            runner.persist()
            await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 2
            )
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_a_failure_naks_and_the_same_sequence_comes_back(hub_leaf, hub_conn) -> None:
    stream = unique("nak").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        (seq,) = await publish(hub_leaf.url("leaf"), f"{stream}.x", [b'{"n": 1}'])
        runner = Triggerer(ack_timeout=1.0)  # the event is never confirmed stored: the watcher fails
        watcher = message_trigger(hub_conn, stream, nak_delay=0.5)
        runner.start(1, watcher)
        try:
            first = (await runner.wait_fired(1))[0]
            await eventually(lambda: runner.errors, bool, timeout=10)
            assert type(runner.errors.pop(1)).__name__ == "AckTimeout"
            runner.fired.clear()
            runner.start(2, watcher)  # Airflow restarts the failed watcher trigger
            again = (await runner.wait_fired(1))[0]
            assert again.event.payload["seq"] == first.event.payload["seq"] == seq
            assert (first.event.payload["delivered"], again.event.payload["delivered"]) == (1, 2)
            runner.persist()
            info = await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == seq
            )
            assert info["num_ack_pending"] == 0
        finally:
            await runner.stop()

    asyncio.run(scenario())


def test_a_hundred_watchers_share_one_consumer_and_one_connection(hub_leaf, jetstream_conn) -> None:
    stream = unique("fan").upper()
    client_name = unique("events-share")
    user, password = USERS["ACC"]
    conn = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, client_name=client_name)

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        runner = Triggerer()
        for tid in range(100):
            runner.start(tid, message_trigger(conn, stream))
        try:
            await eventually(lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), bool)
            await publish(hub_leaf.url("leaf"), f"{stream}.x", [b"1", b"2", b"3"])
            fired = await runner.wait_fired(300)
            assert {f.trigger_id for f in fired} == set(range(100))
            assert connection_count(hub_leaf.hub, client_name) == 1
            nc = await connect(hub_leaf.url("leaf"))
            names = await JetStreamApi(nc, "$JS.leaf.API").request(f"CONSUMER.NAMES.{stream}")
            await nc.close()
            assert names["consumers"] == ["af_events"]
            info = await consumer_state(hub_leaf.url("leaf"), stream, "af_events")
            assert info["num_waiting"] <= 1 and info["num_ack_pending"] == 3
            runner.persist()
            await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 3
            )
        finally:
            await runner.stop()
        assert await eventually(lambda: connection_count(hub_leaf.hub, client_name), lambda n: n == 0) == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"stream": "a.b"}, "stream='a.b'"),
        ({"consumer": "x y"}, "consumer.name='x y'"),
        ({"options": {"deliver_policy": "sometimes"}}, "options.deliver_policy='sometimes'"),
        ({"api_prefix": "JS.acc@hub.API"}, "were both given"),
        ({"filter_subjects": ["a..b"]}, "empty tokens"),
        ({"options": {"max_ack_pending": 0}}, "options.max_ack_pending=0"),
        ({"options": {"ack_wait": -1}}, "options.ack_wait=-1"),
        ({"ack_wait": 5}, "ack_wait=5 is not allowed: moved into options=MessageOptions(ack_wait=5)"),
        ({"opt_start_seq": 5}, "opt_start_seq=5 is not allowed: renamed start_seq, in options=MessageOptions"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"decode": "xml"}, "decode='xml'"),
        ({"dead_letter_stream": "dl.q"}, "dead_letter_stream='dl.q'"),
        ({"event_subjects": ["a.>.b"]}, "'>' may only be the last token"),
        ({"options": {"deliver_policy": "new", "start_seq": 5}}, "start_seq"),
    ],
)
def test_invalid_arguments_are_refused_before_anything_is_sent(hub_leaf, jetstream_conn, kwargs, words) -> None:
    client_name = unique("events-refuse")
    user, password = USERS["ACC"]
    conn = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, client_name=client_name)
    base = {"stream": "S", "consumer": "c", "jetstream_conn_id": conn, "domain": "leaf"}
    with pytest.raises(JetStreamConfigError, match=None) as caught:
        JetStreamMessageTrigger(**{**base, **kwargs})
    assert words in str(caught.value)
    assert connection_count(hub_leaf.hub, client_name) == 0


def test_an_existing_consumer_that_cannot_ack_each_message_is_refused_unchanged(hub_leaf, hub_conn) -> None:
    stream = unique("all").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        nc = await connect(hub_leaf.url("leaf"))
        api = JetStreamApi(nc, "$JS.leaf.API")
        config = {"durable_name": "af_events", "ack_policy": "none", "deliver_policy": "all"}
        await api.request(f"CONSUMER.CREATE.{stream}.af_events", {"stream_name": stream, "config": config})
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream))
        try:
            await eventually(lambda: runner.errors, bool)
            assert "ack_policy='none'" in str(runner.errors[1])
            assert (await api.consumer_info(stream, "af_events"))["config"]["ack_policy"] == "none"
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_batches_and_the_standalone_round_trip(hub_leaf, hub_conn) -> None:
    stream = unique("bat").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        await publish(hub_leaf.url("leaf"), f"{stream}.x", [b"1", b"2", b"3", b"4", b"5"])
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream, consumer="af_batch", batch_size=5, batch_window=5.0))
        try:
            (fired,) = await runner.wait_fired(1)
            payload = fired.event.payload
            assert (payload["count"], payload["first_seq"], payload["last_seq"]) == (5, 1, 5)
            assert [m["data"] for m in payload["messages"]] == [1, 2, 3, 4, 5]
            runner.persist()
            await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_batch"), lambda i: acked_through(i) == 5
            )
        finally:
            await runner.stop()

        # Standalone (Airflow < 3.3's path): serialize -> rebuild -> run(); acked fallback_ack_delay after it fired.
        standalone = rebuild(message_trigger(hub_conn, stream, consumer="af_alone", fallback_ack_delay=0.2))
        events = standalone.run()
        first = await asyncio.wait_for(anext(events), scaled(30))
        assert first.payload["seq"] == 1
        info = await consumer_state(hub_leaf.url("leaf"), stream, "af_alone")
        assert acked_through(info) == 0
        second = asyncio.ensure_future(anext(events))
        await eventually(
            lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_alone"), lambda i: acked_through(i) >= 1
        )
        assert (await second).payload["seq"] == 2
        await events.aclose()

    asyncio.run(scenario())
