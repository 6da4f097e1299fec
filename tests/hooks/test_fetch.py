"""JetStreamHook.fetch / consume on a hub and a leaf: every header value, settle actions, ephemeral reads."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import nats
import pytest

from airflow_provider_jetstream.core.errors import (
    ConsumerDeletedError,
    JetStreamAckError,
    JetStreamConfigError,
    JetStreamNotFoundError,
    SpecErrors,
)
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.management import uid
from tests.support.natsutil import clients_named, publish_raw_headers
from tests.support.waiting import scaled, wait_until


def consumer_info(raw, domain: str, stream: str, consumer: str) -> dict:
    return raw.api(domain, f"CONSUMER.INFO.{stream}.{consumer}")


def declare(raw, domain: str, stream: str, consumer: str, **config) -> None:
    body = {"stream_name": stream, "config": {"durable_name": consumer, "ack_policy": "explicit", **config}}
    reply = raw.api(domain, f"CONSUMER.CREATE.{stream}.{consumer}", body)
    assert "error" not in reply, reply


def test_fetch_a_leaf_stream_through_the_hub_with_every_header_value(hub_conn, hub_leaf, raw) -> None:
    name = uid("fetch")
    raw.create("leaf", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.a", [b"one", b"two", b"three"], server="leaf")
    leaf = hub_leaf.leaves["leaf"]
    user, password = USERS["ACC"]
    publish_raw_headers(
        "127.0.0.1", leaf.port, user, password, f"{name}.h", [("X-Tag", "red"), ("X-Tag", "blue")], b"four"
    )
    hook = JetStreamHook(hub_conn, domain="leaf")

    messages = hook.fetch(name, batch_size=10, max_wait=1)
    assert [(m.subject, m.seq, m.data) for m in messages] == [
        (f"{name}.a", 1, b"one"),
        (f"{name}.a", 2, b"two"),
        (f"{name}.a", 3, b"three"),
        (f"{name}.h", 4, b"four"),
    ]
    assert messages[3].headers == {"X-Tag": ["red", "blue"]}
    assert messages[0].time.tzinfo is not None and messages[0].domain == "leaf"
    # An ephemeral read has nothing to settle, and leaves no consumer behind.
    assert not messages[0].ackable
    with pytest.raises(JetStreamConfigError, match="nothing to settle"):
        messages[0].ack()
    assert raw.api("leaf", f"STREAM.INFO.{name}")["state"]["consumer_count"] == 0
    # From a sequence, only a subject.
    later = hook.fetch(name, batch_size=10, max_wait=0.5, start_seq=2, filter_subjects=f"{name}.a")
    assert [m.seq for m in later] == [2, 3]


def test_durable_fetch_settles_each_message_once(hub_conn, raw) -> None:
    name = uid("dfetch")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.x", [str(i).encode() for i in range(5)])
    declare(raw, "hub", name, "work", ack_wait=30_000_000_000)
    hook = JetStreamHook(hub_conn, domain="hub")

    first = hook.fetch(name, "work", batch_size=3, max_wait=1)
    assert [m.seq for m in first] == [1, 2, 3] and all(m.ackable for m in first)
    assert first[0].in_progress() and first[0].ack()
    assert not first[0].ack() and not first[0].nak()  # settled once: nothing more is sent
    assert first[1].term() and first[1].verdict == "term"
    assert first[2].nak() and first[2].verdict == "nak"

    # The nak'd message comes back (delivered twice); the acked and terminated ones never do.
    async def rest() -> list[tuple[int, int]]:
        got = []
        async with hook.aconnect():
            async for message in hook.aconsume(name, "work", batch_size=10, max_wait=0.5, stop_when_empty=True):
                got.append((message.seq, message.delivered))
                await message.aack()
        return got

    assert sorted(asyncio.run(rest())) == [(3, 2), (4, 1), (5, 1)]
    info = consumer_info(raw, "hub", name, "work")
    assert info["num_pending"] == 0 and info["num_ack_pending"] == 0 and info["ack_floor"]["stream_seq"] == 5


def test_fetch_with_no_wait_returns_what_is_there_at_once(hub_conn, raw) -> None:
    """A no_wait fetch takes the messages there are and returns without waiting max_wait for the batch to fill,
    through the hub from a leaf's stream and from a durable consumer; with nothing there it returns none."""
    max_wait = scaled(120)
    name = uid("nowait")
    raw.create("leaf", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.a", [b"one", b"two", b"three"], server="leaf")
    leaf = JetStreamHook(hub_conn, domain="leaf")

    started = time.monotonic()
    messages = leaf.fetch(name, batch_size=100, max_wait=max_wait, no_wait=True)
    assert [(m.seq, m.data) for m in messages] == [(1, b"one"), (2, b"two"), (3, b"three")]
    assert leaf.fetch(name, batch_size=100, max_wait=max_wait, no_wait=True, start_seq=4) == []
    assert time.monotonic() - started < max_wait / 2, "no_wait waited for the batch to fill"

    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.x", [str(i).encode() for i in range(3)])
    declare(raw, "hub", name, "work", ack_wait=int(max_wait * 4e9))
    hub = JetStreamHook(hub_conn, domain="hub")
    started = time.monotonic()
    first = hub.fetch(name, "work", batch_size=2, max_wait=max_wait, no_wait=True)
    assert [m.seq for m in first] == [1, 2] and all(m.ack() for m in first)
    (last,) = hub.fetch(name, "work", batch_size=100, max_wait=max_wait, no_wait=True)
    assert last.seq == 3 and last.ack()
    assert hub.fetch(name, "work", batch_size=100, max_wait=max_wait, no_wait=True) == []
    assert time.monotonic() - started < max_wait / 2, "no_wait waited for the batch to fill"
    with pytest.raises(SpecErrors, match="no_wait"):
        hub.fetch(name, "work", batch_size=1, no_wait="soon")


def test_nak_with_a_delay_holds_the_message_back(hub_conn, raw) -> None:
    name = uid("nakd")
    raw.create("hub", {"name": name, "subjects": [name]})
    raw.publish(name, [b"x"])
    declare(raw, "hub", name, "work")
    hook = JetStreamHook(hub_conn, domain="hub")
    (message,) = hook.fetch(name, "work", batch_size=1, max_wait=1)
    assert message.nak(delay=3)
    assert hook.fetch(name, "work", batch_size=1, max_wait=0.5) == []  # held back for its delay
    again = wait_until(lambda: hook.fetch(name, "work", batch_size=1, max_wait=1), bool, 30, "the redelivery")
    assert again[0].seq == 1 and again[0].delivered == 2


def test_durable_fetch_refuses_what_the_dag_did_not_declare(hub_conn, raw) -> None:
    name = uid("refuse")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    hook = JetStreamHook(hub_conn, domain="hub")
    with pytest.raises(JetStreamNotFoundError, match="does not exist: declare it first"):
        hook.fetch(name, "undeclared", batch_size=1, max_wait=0.2)
    assert raw.api("hub", f"STREAM.INFO.{name}")["state"]["consumer_count"] == 0  # never created silently
    declare(raw, "hub", name, "narrow", filter_subject=f"{name}.a")
    with pytest.raises(JetStreamConfigError, match=r"not '.*\.b'"):
        hook.fetch(name, "narrow", batch_size=1, max_wait=0.2, filter_subjects=f"{name}.b")
    with pytest.raises(SpecErrors) as refused:
        hook.fetch(name, "", batch_size=0, max_wait=0.2, start_seq=3)
    text = str(refused.value)
    assert "consumer=''" in text and "batch_size=0" in text
    with pytest.raises(SpecErrors, match="start_seq=3 is not allowed: only without a consumer"):
        hook.fetch(name, "narrow", batch_size=1, start_seq=3)


def connections_named(server, name: str, at_least: int = 1) -> int:
    """How many client connections named ``name`` the server saw (open and closed), once it shows ``at_least``:
    a connection the client closed shows among the closed ones a moment later."""
    return wait_until(
        lambda: len(clients_named(server, name, state="all")),
        lambda seen: seen >= at_least,
        10,
        f"{at_least} connections named {name!r}",
    )


def test_settles_from_synchronous_code_share_one_connection(hub_leaf, jetstream_conn, raw) -> None:
    """Acking each message from synchronous code does not open a connection per message: a blocking
    ``consume`` settles on its own connection, and ``hook.connected()`` holds one for a fetch and its acks.
    Outside both, each settle still works on a connection of its own."""
    name = uid("oneconn")
    raw.create("hub", {"name": name, "subjects": [name]})
    raw.publish(name, [str(i).encode() for i in range(60)])
    declare(raw, "hub", name, "work", ack_wait=30_000_000_000)
    client = uid("client")
    user, password = USERS["ACC"]
    conn = jetstream_conn(f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password, client_name=client)
    hook = JetStreamHook(conn, domain="hub")

    consumed = []
    for message in hook.consume(name, "work", batch_size=10, max_wait=0.5, stop_when_empty=True):
        consumed.append(message.seq)
        assert message.ack()
        if len(consumed) == 20:
            break
    assert consumed == list(range(1, 21))
    assert connections_named(hub_leaf.hub, client) == 1

    with hook.connected():
        batch = hook.fetch(name, "work", batch_size=20, max_wait=1)
        assert [m.seq for m in batch] == list(range(21, 41))
        assert all(m.ack() for m in batch)
    assert connections_named(hub_leaf.hub, client, at_least=2) == 2

    rest = hook.fetch(name, "work", batch_size=20, max_wait=1)
    assert all(m.ack() for m in rest[:2])
    assert connections_named(hub_leaf.hub, client, at_least=5) == 2 + 1 + 2  # the fetch's, then one per ack

    info = consumer_info(raw, "hub", name, "work")
    assert info["ack_floor"]["stream_seq"] == 42 and info["num_ack_pending"] == 18


def dropped_when_silent(server: NatsServer) -> bool:
    """Connect a raw client that never answers the server's pings; True once the server dropped it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as raw:
        raw.recv(4096)  # INFO
        raw.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        while raw.recv(4096):  # PONG, the server's PINGs, its -ERR 'Stale Connection'; then EOF
            pass
    return True


def test_a_held_connection_answers_the_server_while_the_task_works(tmp_path, jetstream_conn) -> None:
    """A server drops a client that leaves its pings unanswered. While the caller works on a consumed
    message for longer than that, the iteration's connection still answers: the ack after the work goes
    at once, on the same connection."""
    store = json.dumps(str(tmp_path / "js"))
    server = NatsServer("patient", tmp_path, f'ping_interval: "1s"\nping_max: 1\njetstream {{ store_dir: {store} }}\n')
    server.start()
    try:

        async def declare_stream() -> None:
            nc = await nats.connect(server.url)
            js = nc.jetstream()
            await js.add_stream(name="work", subjects=["work"])
            for payload in (b"one", b"two"):
                await js.publish("work", payload)
            await js.add_consumer("work", durable_name="worker", ack_policy="explicit", ack_wait=120)
            await nc.close()

        asyncio.run(declare_stream())
        client = uid("patient")
        hook = JetStreamHook(jetstream_conn(f"127.0.0.1:{server.port}", client_name=client))
        for message in hook.consume("work", "worker", batch_size=2, max_wait=1, stop_when_empty=True):
            # The work: longer than the server waits for a pong (two silent clients dropped in turn: the
            # second was silent for less time than this one has been).
            assert dropped_when_silent(server) and dropped_when_silent(server)
            assert message.ack()
        assert connections_named(server, client) == 1  # never dropped, never reconnected

        async def ack_floor() -> int:
            nc = await nats.connect(server.url)
            info = await nc.jetstream().consumer_info("work", "worker")
            await nc.close()
            return info.ack_floor.stream_seq

        assert asyncio.run(ack_floor()) == 2
    finally:
        server.stop()


def test_a_durable_consume_reads_every_header_from_the_message_and_confirms_every_ack(
    hub_conn, hub_leaf, api_watch, raw
) -> None:
    """No request per message: every header value comes from the delivered frame; each ack goes out at once and
    the consumer confirms all of them before the iteration ends."""
    name = uid("frames")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    user, password = USERS["ACC"]
    for i in range(30):
        publish_raw_headers(
            "127.0.0.1", hub_leaf.hub.port, user, password, f"{name}.h", [("Nats-Msg-Id", f"m{i}"), ("X-Tag", "a"),
            ("X-Tag", "b")], b"%d" % i,
        )  # fmt: skip
    declare(raw, "hub", name, "work")
    hook = JetStreamHook(hub_conn, domain="hub")
    seen = []
    for message in hook.consume(name, "work", batch_size=7, max_wait=1, stop_when_empty=True):
        assert message.headers == {"Nats-Msg-Id": [f"m{message.seq - 1}"], "X-Tag": ["a", "b"]}
        assert message.ack()
        seen.append(message)
    assert [m.seq for m in seen] == list(range(1, 31))
    assert all(m.confirmed for m in seen)  # every ack answered by the consumer before the loop ended
    info = consumer_info(raw, "hub", name, "work")
    assert (info["num_ack_pending"], info["ack_floor"]["stream_seq"]) == (0, 30)
    asked = api_watch.requests_of(lambda subject: subject.endswith(f"CONSUMER.INFO.{name}.work"))
    assert asked and not [s for s in asked if ".STREAM.MSG.GET." in s]  # no lookup per message


def test_an_ack_the_consumer_cannot_take_names_the_message_and_the_consumer(hub_conn, raw) -> None:
    """The consumer deleted between the fetch and the ack: the ack is not confirmed, and the error says which
    message of which consumer (not a bare "no responders")."""
    name = uid("gone")
    raw.create("hub", {"name": name, "subjects": [f"{name}.>"]})
    raw.publish(f"{name}.a", [b"one"])
    declare(raw, "hub", name, "work")
    hook = JetStreamHook(hub_conn, domain="hub")
    (message,) = hook.fetch(name, "work", batch_size=1, max_wait=1)
    raw.api("hub", f"CONSUMER.DELETE.{name}.work")
    started = time.monotonic()
    with pytest.raises(ConsumerDeletedError, match=rf"\+ACK of message 1 of consumer 'work' on stream '{name}'") as err:
        message.ack()
    assert time.monotonic() - started < scaled(3)
    said = str(err.value)
    assert "stream sequence 1" in said and "domain 'hub'" in said and "consumer was deleted" in said, said
    assert isinstance(err.value, JetStreamAckError)
    assert not message.confirmed and message.verdict is None  # not taken: it may be settled again
