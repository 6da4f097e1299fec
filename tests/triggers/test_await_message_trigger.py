"""``JetStreamAwaitMessageTrigger`` on the real hub + leaf: a match in the leaf's domain through the hub, each ack
mode's effect on the consumer, and a triggerer restart (run cancelled, rebuilt from its serialized kwargs)."""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.read.delivery import ack_by_reply
from airflow_provider_jetstream.triggers.await_message import JetStreamAwaitMessageTrigger
from tests.support import matchers
from tests.support.natsutil import acked_through, connect, consumer_state, unique
from tests.support.triggers import Running, make_stream
from tests.support.waiting import eventually, scaled

FUNCTION = "tests.support.matchers.done_for_site"
FAILS_FIRST = "tests.support.matchers.fails_first_time"


def from_kwargs(classpath: str, kwargs: dict[str, Any]) -> JetStreamAwaitMessageTrigger:
    """The trigger as the triggerer rebuilds it from the row Airflow stored when the task deferred."""
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


async def publish_events(url: str, stream: str, bodies: list[dict]) -> list[int]:
    nc = await connect(url)
    js = nc.jetstream()
    seqs = [(await js.publish(f"{stream}.events", json.dumps(b).encode(), headers={"site": "x"})).seq for b in bodies]
    await nc.close()
    return seqs


NOT_YET = [{"status": "started", "site": "lyon"}, {"status": "done", "site": "oslo"}, {"status": "running"}]
MATCH = {"status": "done", "site": "lyon", "batch": 7}


@pytest.mark.parametrize("ack", ["all_seen", "on_match", "none"])
def test_match_in_the_leaf_through_the_hub_and_what_each_ack_mode_does(hub_leaf, hub_conn, ack) -> None:
    stream, leaf = unique("await"), hub_leaf.url("leaf")
    consumer = None if ack == "none" else "af_await_test"

    async def scenario() -> None:
        await make_stream(leaf, stream)
        trigger = JetStreamAwaitMessageTrigger(
            hub_conn, stream, FUNCTION, {"site": "lyon"}, task_consumer=consumer, ack_mode=ack, deliver_policy="all",
            domain="leaf", max_wait=1, state={"start_sequence": 1} if ack == "none" else None,
        )  # fmt: skip
        classpath, kwargs = trigger.serialize()
        run = Running(from_kwargs(classpath, kwargs))
        seqs = await publish_events(leaf, stream, [*NOT_YET, MATCH, {"status": "later"}])
        event = await run.first()
        assert event["status"] == "success", event
        match = event["result"]["match"]
        assert match["value"] == {"site": "lyon", "batch": 7}
        assert (match["seq"], match["domain"], match["subject"]) == (seqs[3], "leaf", f"{stream}.events")
        assert match["headers"] == {"site": ["x"]}
        subject = event["result"]["ack_subject"]
        if ack == "none":
            assert subject is None  # nothing to ack; no durable consumer exists
            await run.stop()
            return
        held = await consumer_state(leaf, stream, consumer)
        if ack == "all_seen":  # the three examined are acked; the match is held until Airflow stored it
            assert (acked_through(held), held["num_ack_pending"]) == (3, 1)
        else:  # the three examined are left for the consumer's other readers, the match is held
            assert (acked_through(held), held["num_ack_pending"]) == (0, 4)
        nc = await connect(hub_leaf.url("hub"))
        await ack_by_reply(JetStreamApi(nc, timeout=5, failover=0), subject, "the match")  # what the sensor does
        await nc.close()
        await run.stop()
        after = await consumer_state(leaf, stream, consumer)
        if ack == "all_seen":
            assert (acked_through(after), after["num_ack_pending"], after["num_pending"]) == (4, 0, 1)
        else:
            assert (acked_through(after), after["num_ack_pending"]) == (0, 3)  # only the match was acked

    asyncio.run(scenario())


@pytest.mark.parametrize("ack", ["all_seen", "on_match"])
def test_a_restarted_triggerer_neither_loses_nor_rematches(hub_leaf, hub_conn, ack) -> None:
    """The first trigger examines three messages, then finds the match and is killed before Airflow stored its
    event; the trigger rebuilt from the stored kwargs gets the match again (after ack_wait) and fires once.
    With all_seen it examines nothing the first one acked; the match is acked once."""
    stream, leaf = unique("await"), hub_leaf.url("leaf")

    async def scenario() -> None:
        await make_stream(leaf, stream)
        trigger = JetStreamAwaitMessageTrigger(
            hub_conn, stream, FUNCTION, task_consumer="af_await_restart", ack_mode=ack, deliver_policy="all",
            ack_wait=2, domain="leaf", max_wait=1,
        )  # fmt: skip
        classpath, kwargs = trigger.serialize()  # what Airflow stored when the task deferred
        matchers.EXAMINED.clear()
        first = Running(from_kwargs(classpath, kwargs))
        seqs = await publish_events(leaf, stream, NOT_YET)
        await eventually(lambda: list(matchers.EXAMINED), lambda seen: seen == seqs, timeout=30)
        [match_seq] = await publish_events(leaf, stream, [MATCH])
        event = await first.first()
        assert event["result"]["match"]["seq"] == match_seq
        await first.stop()  # killed before the event was stored: nothing acked the match
        matchers.EXAMINED.clear()

        second = Running(from_kwargs(classpath, kwargs))
        event = await second.first(timeout=60)
        assert event["result"]["match"]["seq"] == match_seq
        if ack == "all_seen":
            assert [match_seq] == matchers.EXAMINED  # what the first one acked is not examined again
        else:  # left ones come back once to the new trigger (it has not seen them); none matches
            assert sorted(matchers.EXAMINED) == sorted([*seqs, match_seq])
        nc = await connect(hub_leaf.url("hub"))
        await ack_by_reply(JetStreamApi(nc, timeout=5, failover=0), event["result"]["ack_subject"], "the match")
        await nc.close()
        await second.stop()
        state = await consumer_state(leaf, stream, "af_await_restart")
        assert state["num_pending"] == 0
        assert state["num_ack_pending"] == (0 if ack == "all_seen" else 3)
        assert acked_through(state) == (match_seq if ack == "all_seen" else 0)

    asyncio.run(scenario())


def test_bad_arguments_are_refused_when_the_trigger_is_made(hub_conn) -> None:
    from airflow_provider_jetstream.core.errors import JetStreamConfigError

    with pytest.raises(JetStreamConfigError) as err:
        JetStreamAwaitMessageTrigger(hub_conn, "s", "no_dots", consumer="c", task_consumer="t", ack_mode="sometimes")
    text = str(err.value)
    assert "apply_function='no_dots' is not allowed" in text
    assert "ack_mode='sometimes' is not allowed" in text
    assert "consumer='c' and task_consumer='t' were both given" in text


def test_on_match_fails_saying_so_when_left_messages_reach_max_ack_pending(hub_leaf, hub_conn) -> None:
    """The user's consumer takes 3 unacknowledged messages at most: once 3 are left (on_match), it would
    deliver nothing new, and the match published after them would never come: the trigger fails, saying why."""
    from nats.js.api import AckPolicy, ConsumerConfig

    stream, leaf = unique("await"), hub_leaf.url("leaf")

    async def scenario() -> None:
        await make_stream(leaf, stream)
        nc = await connect(leaf)
        await nc.jetstream().add_consumer(
            stream, ConsumerConfig(durable_name="mine", ack_policy=AckPolicy.EXPLICIT, max_ack_pending=3)
        )
        await nc.close()
        run = Running(
            JetStreamAwaitMessageTrigger(
                hub_conn, stream, FUNCTION, consumer="mine", ack_mode="on_match", domain="leaf", max_wait=1
            )
        )
        await publish_events(leaf, stream, [*NOT_YET, {"status": "idle"}, MATCH])
        event = await run.first()
        await run.stop()
        assert event["status"] == "error", event
        left = "3 examined messages left unacknowledged (ack_mode='on_match') reach its max_ack_pending 3"
        assert left in event["message"]
        assert "Use ack_mode='all_seen', raise max_ack_pending" in event["message"]
        state = await consumer_state(leaf, stream, "mine")
        assert (acked_through(state), state["num_pending"]) == (0, 2)  # nothing acked; the match never delivered

    asyncio.run(scenario())


def test_a_function_that_raises_fails_the_wait_and_its_message_comes_back_unacked(hub_leaf, hub_conn) -> None:
    """The function raises for message #2: the trigger fails with the function's error, #1 (examined) is acked,
    #2 is not; the retry's trigger gets #2 again at once (naked as the failed one stopped) and matches it."""
    stream, leaf = unique("await"), hub_leaf.url("leaf")
    kwargs = dict(task_consumer="af_await_raises", deliver_policy="all", domain="leaf", max_wait=1, ack_wait=60)

    async def scenario() -> None:
        await make_stream(leaf, stream)
        [first] = await publish_events(leaf, stream, [{"status": "started"}])
        run = Running(JetStreamAwaitMessageTrigger(hub_conn, stream, FUNCTION, **kwargs))
        # done_for_site examines #1 (no match, acked); fails_first_time then raises for #2, matches it on the retry
        seen = await eventually(
            lambda: consumer_state(leaf, stream, "af_await_raises"), lambda s: acked_through(s) == first
        )
        assert acked_through(seen) == first
        await run.stop()
        [bad] = await publish_events(leaf, stream, [{"status": "done", "batch": "not json"}])
        run = Running(JetStreamAwaitMessageTrigger(hub_conn, stream, FAILS_FIRST, **kwargs))
        event = await run.first()
        await run.stop()
        assert event["status"] == "error", event
        assert f"apply_function raised on message #{bad} ({stream}.events)" in event["message"]
        assert "ValueError: cannot parse" in event["message"]
        state = await consumer_state(leaf, stream, "af_await_raises")
        assert acked_through(state) == first  # the message it raised for is not acked
        retry = Running(JetStreamAwaitMessageTrigger(hub_conn, stream, FAILS_FIRST, **kwargs))
        event = await retry.first(timeout=20)  # well within ack_wait (60 s): it was naked, not left to expire
        assert event["status"] == "success", event
        match = event["result"]["match"]
        assert (match["seq"], match["value"]) == (bad, {"failed_before": True})
        await retry.stop()

    asyncio.run(scenario())


def test_a_second_puller_of_the_sensors_consumer_is_refused_saying_what_to_do(hub_leaf, hub_conn) -> None:
    """Two runs' triggers on the task's one consumer (max_active_tis_per_dag raised): one fails within a few
    max_wait periods, naming the consumer and the remedy; nothing is acked by either."""
    stream, leaf = unique("await"), hub_leaf.url("leaf")
    kwargs = dict(task_consumer="af_await_shared", deliver_policy="all", domain="leaf", max_wait=1)

    async def scenario() -> None:
        await make_stream(leaf, stream)
        runs = [Running(JetStreamAwaitMessageTrigger(hub_conn, stream, FUNCTION, **kwargs)) for _ in range(2)]
        done, _ = await asyncio.wait([asyncio.ensure_future(r.first()) for r in runs], timeout=scaled(30),
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        for run in runs:
            await run.stop()
        assert done, "neither puller was refused"
        event = done.pop().result()
        assert event["status"] == "error", event
        assert "consumer 'af_await_shared'" in event["message"]
        assert "is also pulled by another client" in event["message"]
        assert "keep the sensor's max_active_tis_per_dag at 1" in event["message"]

    asyncio.run(scenario())
