"""``JetStreamConsumerLagTrigger`` against the real hub + leaf: serialize -> rebuild -> run, acks, sharing."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.testing.servers import USERS
from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger
from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger
from tests.support.logs import LogLines, captured_logs
from tests.support.natsutil import connect, connection_count, leaf_stream_with_consumer, messages_sent, unique
from tests.support.triggers import first_event, rebuild
from tests.support.waiting import eventually


def test_trigger_fires_only_after_the_last_ack(hub_leaf, hub_conn) -> None:
    stream = unique("cl")

    async def scenario(logs: LogLines) -> tuple[dict, list[str]]:
        await leaf_stream_with_consumer(hub_leaf.url("leaf"), stream, 5)
        trigger = JetStreamConsumerLagTrigger(hub_conn, stream, "worker", domain="leaf", poll_interval=0.2)
        fired = asyncio.create_task(first_event(trigger, timeout=30))
        states = []
        nc = await connect(hub_leaf.url("leaf"))
        sub = await nc.jetstream().pull_subscribe_bind("worker", stream)
        msgs = await sub.fetch(5, timeout=5)
        # Each check the trigger makes is logged with the counts it saw: it judged this state and waits on.
        await logs.wait_for("waiting: outstanding acks (num_ack_pending) 5 > max_outstanding_acks 0")
        states.append("fetched:" + ("fired" if fired.done() else "waiting"))
        for msg in msgs[:-1]:
            await msg.ack_sync()
        await logs.wait_for("waiting: outstanding acks (num_ack_pending) 1 > max_outstanding_acks 0")
        states.append("4 acked:" + ("fired" if fired.done() else "waiting"))
        await msgs[-1].ack_sync()
        event = await fired
        await nc.close()
        return event.payload, states

    with captured_logs() as logs:
        payload, states = asyncio.run(scenario(logs))
    assert states == ["fetched:waiting", "4 acked:waiting"]
    assert payload["status"] == "success"
    consumer = payload["consumer"]
    assert (consumer["num_pending"], consumer["num_ack_pending"], consumer["num_redelivered"]) == (0, 0, 0)
    assert consumer["delivered"] == {"consumer_seq": 5, "stream_seq": 5}
    assert consumer["ack_floor"] == {"consumer_seq": 5, "stream_seq": 5}
    assert consumer["target"] == "domain 'leaf'"


def test_thresholds_allow_some_unprocessed_messages(hub_leaf, hub_conn) -> None:
    stream = unique("cl")
    asyncio.run(leaf_stream_with_consumer(hub_leaf.url("leaf"), stream, 3))
    trigger = JetStreamConsumerLagTrigger(
        hub_conn, stream, "worker", domain="leaf", max_unprocessed=3, poll_interval=0.2
    )
    event = asyncio.run(first_event(trigger, timeout=10))
    assert event.payload["status"] == "success"
    assert event.payload["consumer"]["num_pending"] == 3


@pytest.mark.parametrize("missing", ["stream", "consumer"])
def test_missing_stream_or_consumer_fires_an_error_at_once(hub_leaf, hub_conn, missing) -> None:
    stream = unique("cl")
    asyncio.run(leaf_stream_with_consumer(hub_leaf.url("leaf"), stream, 0))
    name = (stream + "_nope", "worker") if missing == "stream" else (stream, "nope")
    trigger = JetStreamConsumerLagTrigger(hub_conn, *name, domain="leaf", poll_interval=0.2)
    event = asyncio.run(first_event(trigger, timeout=5))
    assert event.payload["status"] == "error" and event.payload["reason"] == "not_found"
    expected = (
        f"stream '{stream}_nope' does not exist in domain 'leaf'"
        if missing == "stream"
        else f"consumer 'nope' does not exist on stream '{stream}' in domain 'leaf'"
    )
    assert event.payload["message"].startswith(expected)


def test_unreachable_domain_keeps_waiting_instead_of_failing(hub_leaf, hub_conn) -> None:
    trigger = JetStreamConsumerLagTrigger(hub_conn, "s", "c", domain="sens-no-such-domain", poll_interval=0.2)

    async def scenario(logs: LogLines) -> bool:
        fired = asyncio.create_task(first_event(trigger, timeout=60))
        try:
            # logged once it asked, got no answer and chose to wait (a failure would be an event instead)
            await logs.wait_for("consumer 's' > 'c': cannot check yet:")
            return fired.done()
        finally:
            fired.cancel()
            await asyncio.gather(fired, return_exceptions=True)

    with captured_logs() as logs:
        assert asyncio.run(scenario(logs)) is False  # no event: it keeps waiting


def test_kwargs_name_the_connection_id_never_a_secret(hub_leaf, hub_conn) -> None:
    trigger = rebuild(JetStreamConsumerLagTrigger(hub_conn, "s", "c", domain="leaf"))
    _, kwargs = trigger.serialize()
    assert kwargs["jetstream_conn_id"] == hub_conn
    assert USERS["ACC"][1] not in repr(kwargs).replace(hub_conn, "")


# -- one NATS connection per Airflow connection, shared by every trigger of the triggerer ------------


@pytest.fixture
def shared_conn(hub_leaf, jetstream_conn) -> tuple[str, str]:
    """A connection id whose NATS client name is unique, so the hub's connz can count its clients."""
    client_name = unique("share")
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, client_name=client_name)
    return conn_id, client_name


def lag_triggers(conn_id: str, hub_stream: str, leaf_stream: str, count: int) -> list:
    """Triggers that keep waiting (a message stays unprocessed), half on the hub, half on the leaf."""
    triggers = []
    for i in range(count):
        domain, stream = ("hub", hub_stream) if i % 2 else ("leaf", leaf_stream)
        if i % 4 == 3:
            # sources a leaf stream that does not exist: reports an error, within a long grace period
            agg = f"{hub_stream}_agg"
            triggers.append(
                JetStreamReplicationLagTrigger(
                    conn_id, agg, domain="hub", options={"error_grace": 600}, poll_interval=0.2
                )
            )
        else:
            triggers.append(JetStreamConsumerLagTrigger(conn_id, stream, "worker", domain=domain, poll_interval=0.2))
    return [rebuild(t) for t in triggers]


async def hub_and_leaf_streams(hub_leaf, hub_stream: str, leaf_stream: str) -> None:
    await leaf_stream_with_consumer(hub_leaf.url("leaf"), leaf_stream, 1)
    nc = await connect(hub_leaf.url("hub"))
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=hub_stream, subjects=[f"{hub_stream}.in"]))
    await js.publish(f"{hub_stream}.in", b"m")
    await js.add_consumer(hub_stream, ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT))
    missing = StreamSource(name=f"{leaf_stream}_missing", external=ExternalStream(api="$JS.leaf.API"))
    await js.add_stream(StreamConfig(name=f"{hub_stream}_agg", sources=[missing]))
    await nc.close()


async def run_all(triggers: list, stagger: bool, server, client_name: str) -> tuple[int, int]:
    """Run the triggers as the triggerer does; return (connections while running, after they end)."""
    tasks = []
    for index, trigger in enumerate(triggers):
        tasks.append(asyncio.create_task(anext(trigger.run())))
        if stagger and index == 0:  # the first one has opened the connection before the others start
            opened = await eventually(lambda: connection_count(server, client_name), lambda n: n > 0)
            assert opened, "the first trigger opened no connection"
    while_running = await eventually(lambda: connection_count(server, client_name), lambda n: n >= 1)
    # All of them running a while (about three checks each): none may fire, none may open its own connection.
    await eventually(lambda: messages_sent(server, client_name), lambda n: n >= 3 * len(triggers), 60)
    assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
    while_running = max(while_running, connection_count(server, client_name))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return while_running, await eventually(lambda: connection_count(server, client_name), lambda n: n == 0)


def test_triggers_share_the_connection_whatever_domain_they_watch(hub_leaf, shared_conn) -> None:
    conn_id, client_name = shared_conn
    hub_stream, leaf_stream = unique("share"), unique("share")
    asyncio.run(hub_and_leaf_streams(hub_leaf, hub_stream, leaf_stream))
    triggers = lag_triggers(conn_id, hub_stream, leaf_stream, 40)
    while_running, after = asyncio.run(run_all(triggers, True, hub_leaf.hub, client_name))
    assert (while_running, after) == (1, 0)


def test_triggers_started_together_share_one_connection(hub_leaf, shared_conn) -> None:
    conn_id, client_name = shared_conn
    hub_stream, leaf_stream = unique("share"), unique("share")
    asyncio.run(hub_and_leaf_streams(hub_leaf, hub_stream, leaf_stream))
    triggers = lag_triggers(conn_id, hub_stream, leaf_stream, 40)
    while_running, after = asyncio.run(run_all(triggers, False, hub_leaf.hub, client_name))
    assert (while_running, after) == (1, 0)


@pytest.mark.parametrize("kind", ["consumer_lag", "replication_lag"])
def test_a_cancel_that_lands_with_a_reply_ends_the_trigger(hub_leaf, shared_conn, monkeypatch, kind) -> None:
    """The triggerer's cancel() and a JetStream reply in one loop iteration: the trigger still ends.

    nats-py awaits each reply with ``asyncio.wait_for``, which before Python 3.12 returns the reply
    and drops the cancellation when both land together; the trigger then polled on forever (a
    triggerer could never remove it, and its connection stayed open). The race is made certain
    here: the first reply is handed over through ``wait_for`` just as the trigger is cancelled.
    """
    conn_id, client_name = shared_conn
    hub_stream, leaf_stream = unique("share"), unique("share")
    asyncio.run(hub_and_leaf_streams(hub_leaf, hub_stream, leaf_stream))
    trigger = lag_triggers(conn_id, hub_stream, leaf_stream, 4)[0 if kind == "consumer_lag" else 3]
    real_request = JetStreamApi.request
    landed = []

    async def scenario() -> tuple[bool, int]:
        task: asyncio.Task | None = None

        async def request(api: JetStreamApi, suffix: str, body=None) -> dict:
            reply = await real_request(api, suffix, body)
            if landed or task is None:
                return reply
            loop = asyncio.get_running_loop()
            handed = loop.create_future()

            def land() -> None:  # the reply and the cancel, in one loop iteration
                handed.set_result(reply)
                task.cancel()
                landed.append(suffix)

            loop.call_soon(land)
            return await asyncio.wait_for(handed, 5)  # as nats-py awaits a reply

        monkeypatch.setattr(JetStreamApi, "request", request)
        task = asyncio.create_task(anext(trigger.run()))
        ended = await eventually(lambda: task.done(), bool, timeout=15)
        if not ended:
            task.cancel()  # lost again if it lands with a reply, so the test cannot hang on it
            await asyncio.wait({task}, timeout=5)
        after = await eventually(lambda: connection_count(hub_leaf.hub, client_name), lambda n: n == 0)
        return ended and task.cancelled(), after

    cancelled, after = asyncio.run(scenario())
    assert landed, "the trigger made no request"
    assert (cancelled, after) == (True, 0)
