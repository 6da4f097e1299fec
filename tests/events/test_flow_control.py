"""Flow control of the event producer under Airflow's manager: bounded in-flight, +WPI, one group per consumer."""

from __future__ import annotations

import asyncio
import time

from tests.support.natsutil import acked_through, connect, consumer_state, leaf_stream, publish, unique
from tests.support.triggerer import Triggerer
from tests.support.triggers import message_trigger
from tests.support.waiting import eventually


def test_a_small_subscriber_queue_never_overflows_and_everything_is_acked(hub_leaf, hub_conn, monkeypatch) -> None:
    stream = unique("flow").upper()
    monkeypatch.setenv("AIRFLOW__TRIGGERER__SHARED_STREAM_SUBSCRIBER_QUEUE_SIZE", "20")

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        await publish(hub_leaf.url("leaf"), f"{stream}.x", [str(i).encode() for i in range(300)])
        # Airflow fails a watcher whose queue overflows; the producer keeps at most half a queue in flight
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream))
        try:
            await runner.wait_fired(10)
            # The server's view: ten delivered and unacked, the other 290 not handed out at all.
            held = await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"),
                lambda i: (i.get("num_ack_pending"), i.get("num_pending")) == (10, 290),
            )
            assert (held["num_ack_pending"], held["num_pending"], held["num_waiting"]) == (10, 290, 0)
            assert len(runner.fired) == 10 and not runner.errors
            while len({f.event.payload["seq"] for f in runner.fired}) < 300:
                before = runner.persist() and len(runner.fired)
                await eventually(lambda: len(runner.fired), lambda n: n > before, 10)  # noqa: B023
                assert not runner.errors, runner.errors
            runner.persist()
            info = await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 300
            )
            assert info["num_redelivered"] == 0 and len(runner.fired) == 300
        finally:
            await runner.stop()

    asyncio.run(scenario())


def test_wpi_keeps_a_message_alive_while_airflow_persists_it(hub_leaf, hub_conn) -> None:
    stream = unique("wpi").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        await publish(hub_leaf.url("leaf"), f"{stream}.x", [b"slow"])
        # The consumer's acks, seen where the consumer lives: every +WPI the producer sends for it.
        watcher = await connect(hub_leaf.url("leaf"))
        renewals: list[float] = []

        async def on_ack(msg) -> None:
            if msg.data == b"+WPI" and f".{stream}.af_events." in msg.subject:
                renewals.append(time.monotonic())

        await watcher.subscribe("$JS.ACK.>", cb=on_ack)
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream, ack_wait=1.0))
        try:
            await runner.wait_fired(1)
            fired_at = time.monotonic()
            # Unsettled through three ack waits, renewed all along: without +WPI the server would redeliver it.
            await eventually(
                lambda: (len(renewals), time.monotonic() - fired_at), lambda s: s[0] >= 9 and s[1] >= 3.0, 30
            )
            assert len(renewals) >= 9
            info = await consumer_state(hub_leaf.url("leaf"), stream, "af_events")
            assert (info["num_redelivered"], info["num_ack_pending"], len(runner.fired)) == (0, 1, 1)
            runner.persist()
            await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 1
            )
        finally:
            await runner.stop()
            await watcher.close()

    asyncio.run(scenario())


def test_watchers_disagreeing_on_one_consumer_are_refused_not_competing(hub_leaf, hub_conn) -> None:
    stream = unique("clash").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        runner = Triggerer()
        runner.start(1, message_trigger(hub_conn, stream))
        try:
            await eventually(lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), bool)
            runner.start(2, message_trigger(hub_conn, stream, max_ack_pending=7))  # same consumer, other settings
            await eventually(lambda: runner.errors, bool)
            assert list(runner.errors) == [2]
            assert "already consumed in this triggerer by watchers with other settings" in str(runner.errors[2])
            await publish(hub_leaf.url("leaf"), f"{stream}.x", [b"1"])
            (fired,) = await runner.wait_fired(1, ignore_errors=True)
            assert fired.trigger_id == 1
        finally:
            await runner.stop()

    asyncio.run(scenario())


def test_a_second_triggerer_pulling_the_same_consumer_is_refused_not_splitting_messages(hub_leaf, hub_conn) -> None:
    """Two triggerers (two managers, as two processes would have) on one consumer: each would get
    part of the messages. Each one that sees the other's pull requests fails its watchers with the
    reason (one or both, depending on who looks first and how long the other's last pull request
    lingers), so the clash shows instead of events going missing; a survivor, if any, has the consumer
    alone and gets every message."""
    stream = unique("rival").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        first, second = Triggerer(), Triggerer()
        first.start(1, message_trigger(hub_conn, stream))
        second.start(2, message_trigger(hub_conn, stream))
        try:
            await eventually(lambda: len(first.errors) + len(second.errors), bool, timeout=90)
            await publish(hub_leaf.url("leaf"), f"{stream}.x", [b"1", b"2", b"3"])
            for runner in (first, second):
                # Each ends refused, or with every message: the other's last pull request can outlive its
                # refusal, so the one still running may see it and be refused too; never a share of them.
                await eventually(lambda r=runner: (len(r.fired), bool(r.errors)), lambda v: v[0] >= 3 or v[1])
                for refused in runner.errors.values():
                    assert "is also pulled by another client" in str(refused)
                    assert "give each watcher its own consumer name" in str(refused)
                if not runner.errors:
                    assert sorted(f.event.payload["seq"] for f in runner.fired) == [1, 2, 3]
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(scenario())


def test_a_message_failing_max_deliver_times_is_dead_lettered_and_terminated(hub_leaf, hub_conn) -> None:
    import json

    from tests.support.natsutil import connect

    stream = unique("maxd").upper()
    dlq = f"{stream}_DLQ"

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream, dlq)
        await publish(hub_leaf.url("leaf"), f"{stream}.x", [b'{"poison": true}'])
        nc = await connect(hub_leaf.url("leaf"))
        terminated: list[dict] = []

        async def on_term(msg) -> None:
            terminated.append(json.loads(msg.data))

        await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.af_events", cb=on_term)
        runner = Triggerer(ack_timeout=1.0)  # never stored: each delivery fails
        watcher = message_trigger(hub_conn, stream, max_deliver=2, nak_delay=0.2, dead_letter_stream=dlq)
        try:
            for attempt, tid in enumerate((1, 2), start=1):
                runner.start(tid, watcher)  # Airflow restarts a failed watcher trigger
                await eventually(lambda tid=tid: tid in runner.errors, bool)
                assert runner.fired[-1].event.payload["delivered"] == attempt
            await eventually(lambda: len(terminated), lambda n: n == 1)
            copy = await nc.jetstream().get_msg(dlq, 1)
            assert copy.headers["Airflow-DLQ-Reason"] == "max_deliver reached after failures"
            assert copy.headers["Airflow-DLQ-Delivered"] == "2"
        finally:
            await runner.stop()
            await nc.close()

    asyncio.run(scenario())


def test_watchers_narrowing_by_subject_share_the_consumer_and_each_gets_its_own(hub_leaf, hub_conn) -> None:
    stream = unique("narrow").upper()

    async def scenario() -> None:
        await leaf_stream(hub_leaf.url("leaf"), stream)
        runner = Triggerer()
        a, b = (
            message_trigger(hub_conn, stream, event_subjects=[f"{stream}.a"]),
            message_trigger(hub_conn, stream, event_subjects=[f"{stream}.b.>"]),
        )
        assert a.shared_stream_key() == b.shared_stream_key()  # one group, one consumer
        runner.start(1, a)
        runner.start(2, b)
        try:
            await eventually(lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), bool)
            await publish(hub_leaf.url("leaf"), f"{stream}.a", [b"for a"])
            await publish(hub_leaf.url("leaf"), f"{stream}.b.x", [b"for b"])
            await publish(hub_leaf.url("leaf"), f"{stream}.c", [b"for nobody"])
            fired = await runner.wait_fired(2)
            assert sorted((f.trigger_id, f.event.payload["data"]) for f in fired) == [(1, "for a"), (2, "for b")]
            runner.persist()
            await eventually(
                lambda: consumer_state(hub_leaf.url("leaf"), stream, "af_events"), lambda i: acked_through(i) == 3
            )
            assert len(runner.fired) == 2
        finally:
            await runner.stop()

    asyncio.run(scenario())
