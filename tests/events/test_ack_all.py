"""``JetStreamMessageTrigger`` on an ``ack_policy: all`` consumer: one ack covers a floor of stored messages."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.protocol import parse_ack_reply
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger
from tests.support.natsutil import acked_through, connect, consumer_state, leaf_stream, publish, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import message_trigger, rebuild
from tests.support.waiting import eventually


class AckMonitor:
    """Hears every ack sent for ``stream`` (on the test's own connection) and checks at once that every
    message it covers (stream sequence <= the acked one, AckAll) was stored or rejected by every watcher."""

    def __init__(self, stream: str, watchers: int) -> None:
        self.stream, self.watchers = stream, watchers
        self.settled: dict[int, set[int]] = {}  # sequence -> watchers that stored (or rejected) it
        self.acks: list[tuple[int, bytes]] = []
        self.early: list[int] = []

    def stored(self, runner: Triggerer, which=lambda f: True) -> int:
        """Record, then confirm, the events ``which`` selects (an ack they cause arrives after this)."""
        for f in runner.fired:
            if f.seq is not None and which(f):
                self.settled.setdefault(f.event.payload["seq"], set()).add(f.trigger_id)
        return runner.persist(which)

    def rejected(self, sequence: int) -> None:
        self.settled[sequence] = set(range(1, self.watchers + 1))

    async def on_ack(self, msg) -> None:
        meta = parse_ack_reply(msg.subject)
        if meta is None or meta.stream != self.stream or msg.data not in (b"+ACK", b"+TERM"):
            return
        self.acks.append((meta.sequence, msg.data))
        if any(len(self.settled.get(seq, ())) < self.watchers for seq in range(1, meta.sequence + 1)):
            self.early.append(meta.sequence)


async def ack_all_consumer(url: str, stream: str, name: str = "af_events") -> None:
    """An AckAll durable pull consumer made outside Airflow (the trigger adopts it)."""
    nc = await connect(url)
    config = {"durable_name": name, "ack_policy": "all", "deliver_policy": "all", "max_ack_pending": 256}
    await JetStreamApi(nc, "$JS.leaf.API").request(
        f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": config}
    )
    await nc.close()


def state(url: str, stream: str):
    return lambda: consumer_state(url, stream, "af_events")


def test_an_ack_all_consumer_is_acked_once_everything_below_is_stored_with_fewer_acks(hub_leaf, hub_conn) -> None:
    stream = unique("aall").upper()
    url = hub_leaf.url("leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream)
        await ack_all_consumer(url, stream)  # adopted: the trigger's default (explicit) applies to new ones only
        await publish(url, f"{stream}.x", [json.dumps({"n": n}).encode() for n in range(1, 21)])
        monitor = AckMonitor(stream, watchers=3)
        nc = await connect(url)
        await nc.subscribe("$JS.ACK.>", cb=monitor.on_ack)
        await nc.flush()
        runner = Triggerer()
        for tid in (1, 2, 3):
            runner.start(tid, message_trigger(hub_conn, stream))
        try:
            fired = await runner.wait_fired(60)
            assert sorted(f.event.payload["seq"] for f in fired if f.trigger_id == 1) == list(range(1, 21))
            info = await consumer_state(url, stream, "af_events")
            assert info["config"]["ack_policy"] == "all"
            assert (acked_through(info), info["num_ack_pending"]) == (0, 20)

            monitor.stored(runner, lambda f: f.trigger_id in (1, 2))  # two of three watchers stored everything
            monitor.stored(runner, lambda f: f.trigger_id == 3 and f.event.payload["seq"] in (1, 2, 4))
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 2)
            assert info["num_ack_pending"] == 18  # 4 is stored, but 3 is not: 4 waits for it
            monitor.stored(runner)
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 20)
            assert (info["num_ack_pending"], info["num_redelivered"]) == (0, 0)
            await eventually(lambda: monitor.acks, lambda acks: acks and acks[-1][0] == 20)
            assert monitor.early == []
            assert 1 <= len(monitor.acks) < 20, monitor.acks
            assert monitor.acks[-1] == (20, b"+ACK")
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_a_failed_message_holds_the_floor_until_it_comes_back_and_is_stored(hub_leaf, hub_conn) -> None:
    stream = unique("aafail").upper()
    url = hub_leaf.url("leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream)
        await publish(url, f"{stream}.x", [json.dumps({"n": n}).encode() for n in range(1, 11)])
        monitor = AckMonitor(stream, watchers=2)
        nc = await connect(url)
        await nc.subscribe("$JS.ACK.>", cb=monitor.on_ack)
        await nc.flush()
        # Watcher 2 never stores message 5: after ack_timeout it fails, so 5 is naked; watcher 1 stays.
        runner = Triggerer(ack_timeout=5.0)
        for tid in (1, 2):
            runner.start(tid, message_trigger(hub_conn, stream, ack_policy="all", nak_delay=0.5))
        try:
            await runner.wait_fired(20)
            monitor.stored(runner, lambda f: f.trigger_id == 1 or f.event.payload["seq"] != 5)
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 4)
            assert info["config"]["ack_policy"] == "all"
            await eventually(lambda: runner.errors, bool, timeout=30)
            assert type(runner.errors.pop(2)).__name__ == "AckTimeout"
            again = await eventually(
                lambda: [f for f in runner.fired if f.event.payload["delivered"] == 2],
                bool,
            )
            assert [(f.trigger_id, f.event.payload["seq"]) for f in again] == [(1, 5)]  # watcher 2 failed out
            info = await consumer_state(url, stream, "af_events")
            assert (acked_through(info), info["num_ack_pending"]) == (4, 6)  # 6..10 stored, held behind 5
            assert not [f for f in runner.fired if f.event.payload["seq"] != 5 and f.event.payload["delivered"] > 1]
            monitor.watchers = 1  # watcher 2 failed out: watcher 1's store is the last one 5 needs
            monitor.stored(runner)
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 10)
            assert info["num_ack_pending"] == 0
            assert monitor.early == []
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_a_rejected_message_is_dead_lettered_and_the_floor_passes_it(hub_leaf, hub_conn) -> None:
    stream = unique("aarej").upper()
    dlq = f"{stream}_DLQ"
    url = hub_leaf.url("leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream, dlq)
        payloads = [b'{"n": 1}', b'{"n": 2}', b"not json", b'{"n": 4}', b'{"n": 5}', b"nor this"]
        await publish(url, f"{stream}.x", payloads)
        monitor = AckMonitor(stream, watchers=1)
        monitor.rejected(3)
        monitor.rejected(6)
        nc = await connect(url)
        await nc.subscribe("$JS.ACK.>", cb=monitor.on_ack)
        terminated: list[dict] = []

        async def on_term(msg) -> None:
            terminated.append(json.loads(msg.data))

        await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.af_events", cb=on_term)
        await nc.flush()
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream, ack_policy="all", decode="json", dead_letter_stream=dlq))
        try:
            fired = await runner.wait_fired(4)
            assert [f.event.payload["seq"] for f in fired] == [1, 2, 4, 5]
            info = await consumer_state(url, stream, "af_events")
            assert (acked_through(info), info["num_ack_pending"]) == (0, 6)  # nothing stored yet: nothing acked
            monitor.stored(runner)
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 6)
            assert info["num_ack_pending"] == 0
            js = nc.jetstream()
            copies = [await js.get_msg(dlq, n) for n in (1, 2)]
            assert [c.headers["Airflow-DLQ-Sequence"] for c in copies] == ["3", "6"]
            assert copies[0].data == b"not json" and copies[0].headers["Airflow-DLQ-Reason"] == "rejected by a watcher"
            await eventually(lambda: monitor.acks, bool)
            assert monitor.acks == [(6, b"+TERM")]  # the floor is a rejected message: terminated, covering 1..5
            await eventually(lambda: len(terminated), lambda n: n == 1)
            assert terminated[0]["stream_seq"] == 6
            assert monitor.early == []
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_held_stored_messages_count_in_max_ack_pending_and_the_failed_one_still_comes_back(hub_leaf, hub_conn) -> None:
    stream = unique("aabound").upper()
    url = hub_leaf.url("leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream)
        await publish(url, f"{stream}.x", [json.dumps({"n": n}).encode() for n in range(1, 9)])
        runner = Triggerer(ack_timeout=5.0)
        for tid in (1, 2):
            runner.start(tid, message_trigger(hub_conn, stream, ack_policy="all", max_ack_pending=4, nak_delay=0.5))
        try:
            await runner.wait_fired(8)
            assert sorted({f.event.payload["seq"] for f in runner.fired}) == [1, 2, 3, 4]
            runner.persist(lambda f: f.trigger_id == 1 or f.event.payload["seq"] != 1)  # 1 fails for watcher 2
            again = await eventually(
                lambda: [f for f in runner.fired if f.event.payload["delivered"] == 2], bool, timeout=30
            )
            assert [f.event.payload["seq"] for f in again] == [1]  # 2..4 stored and held: nothing new came
            assert not [f for f in runner.fired if f.event.payload["seq"] > 4]
            assert type(runner.errors.pop(2)).__name__ == "AckTimeout"
            runner.persist()
            await runner.wait_fired(9 + 4)  # then 5..8 for watcher 1
            runner.persist()
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 8)
            assert info["num_ack_pending"] == 0
        finally:
            await runner.stop()

    asyncio.run(scenario())


def test_ack_policy_none_is_refused_and_a_bogus_one_at_construction(hub_leaf, hub_conn) -> None:
    stream = unique("aanone").upper()
    url = hub_leaf.url("leaf")
    with pytest.raises(JetStreamConfigError) as caught:
        message_trigger(hub_conn, stream, ack_policy="bogus")
    assert "ack_policy='bogus' is not allowed: use one of explicit, all" in str(caught.value)
    assert rebuild(message_trigger(hub_conn, stream, ack_policy="all")).kwargs["ack_policy"] == "all"
    assert message_trigger(hub_conn, stream).kwargs["ack_policy"] == "explicit"

    async def scenario() -> None:
        await leaf_stream(url, stream)
        nc = await connect(url)
        api = JetStreamApi(nc, "$JS.leaf.API")
        config = {"durable_name": "af_none", "ack_policy": "none", "deliver_policy": "all"}
        await api.request(f"CONSUMER.CREATE.{stream}.af_none", {"stream_name": stream, "config": config})
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream, consumer="af_none", ack_policy="all"))
        # Two groups on one consumer with different ack policies: the second is refused.
        runner.start(2, message_trigger(hub_conn, stream, consumer="af_pair", ack_policy="all"))
        await eventually(lambda: consumer_state(url, stream, "af_pair"), bool)
        runner.start(3, message_trigger(hub_conn, stream, consumer="af_pair"))
        try:
            await eventually(lambda: set(runner.errors), lambda e: {1, 3} <= e)
            assert "ack_policy='none'" in str(runner.errors[1])
            assert (await api.consumer_info(stream, "af_none"))["config"]["ack_policy"] == "none"
            assert "other settings" in str(runner.errors[3])
            assert 2 not in runner.errors
            assert (await api.consumer_info(stream, "af_pair"))["config"]["ack_policy"] == "all"
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_the_trigger_kwargs_round_trip(hub_conn) -> None:
    made = JetStreamMessageTrigger(jetstream_conn_id=hub_conn, stream="S", consumer="c", options={"ack_policy": "all"})
    again = rebuild(made)
    assert again.kwargs == made.kwargs and again.spec.values["ack_policy"] == "all"
    assert again.shared_stream_key() == made.shared_stream_key()
    explicit = JetStreamMessageTrigger(jetstream_conn_id=hub_conn, stream="S", consumer="c")
    assert explicit.shared_stream_key() != made.shared_stream_key()


def test_messages_a_previous_run_left_pending_hold_the_floor_until_they_come_back(hub_leaf, hub_conn) -> None:
    stream = unique("aacrash").upper()
    url = hub_leaf.url("leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream)
        nc = await connect(url)
        api = JetStreamApi(nc, "$JS.leaf.API")
        config = {"durable_name": "af_events", "ack_policy": "all", "ack_wait": int(3e9), "max_ack_pending": 256}
        await api.request(f"CONSUMER.CREATE.{stream}.af_events", {"stream_name": stream, "config": config})
        await publish(url, f"{stream}.x", [json.dumps({"n": n}).encode() for n in range(1, 7)])
        # A triggerer that died holding 1..3: delivered, never acked nor naked (they come back after ack_wait).
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(f"$JS.leaf.API.CONSUMER.MSG.NEXT.{stream}.af_events", b'{"batch": 3}', reply=inbox)
        taken = [parse_ack_reply((await sub.next_msg(timeout=10)).reply).sequence for _ in range(3)]
        assert taken == [1, 2, 3]
        await sub.unsubscribe()
        monitor = AckMonitor(stream, watchers=1)
        await nc.subscribe("$JS.ACK.>", cb=monitor.on_ack)
        await nc.flush()
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream, ack_policy="all", ack_wait=3.0))
        try:
            await runner.wait_fired(3)
            assert [f.event.payload["seq"] for f in runner.fired] == [4, 5, 6]
            monitor.stored(runner)  # stored, but 1..3 are still pending on the server: no ack may cover them
            back = await eventually(lambda: [f for f in runner.fired if f.seq is not None], lambda b: len(b) == 3)
            assert sorted((f.event.payload["seq"], f.event.payload["delivered"]) for f in back) == [
                (1, 2),
                (2, 2),
                (3, 2),
            ]
            info = await consumer_state(url, stream, "af_events")
            assert (acked_through(info), info["num_ack_pending"]) == (0, 6)
            assert monitor.acks == []
            monitor.stored(runner)
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 6)
            assert info["num_ack_pending"] == 0 and monitor.early == []
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_after_a_restart_what_was_stored_above_the_floor_fires_again_and_nothing_below_it(hub_leaf, hub_conn) -> None:
    stream = unique("aarestart").upper()
    url = hub_leaf.url("leaf")

    async def scenario() -> None:
        await leaf_stream(url, stream)
        await publish(url, f"{stream}.x", [json.dumps({"n": n}).encode() for n in range(1, 7)])
        watcher = message_trigger(hub_conn, stream, ack_policy="all", ack_wait=3.0)
        first = Triggerer()
        first.start(1, watcher)
        try:
            await first.wait_fired(6)
            first.persist(lambda f: f.event.payload["seq"] != 4)
            await eventually(state(url, stream), lambda i: acked_through(i) == 3)
        finally:
            await first.stop()  # 4 never stored; 5 and 6 stored but held behind it
        second = Triggerer()
        second.start(1, watcher)
        try:
            fired = await second.wait_fired(3)
            assert sorted(f.event.payload["seq"] for f in fired) == [4, 5, 6]  # at-least-once: 5, 6 again
            assert all(f.event.payload["delivered"] >= 2 for f in fired)
            second.persist()
            info = await eventually(state(url, stream), lambda i: acked_through(i) == 6)
            assert info["num_ack_pending"] == 0
            assert len(second.fired) == 3
        finally:
            await second.stop()

    asyncio.run(scenario())
