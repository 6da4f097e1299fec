"""``JetStreamRetentionHeadroomSensor`` and ``JetStreamHook.retention_headroom`` on real servers: a healthy copy
passes with its headroom reported; a leaf with a small ``max_msgs``, cut from the hub while messages keep
arriving on it, fails the sensor (and the trigger it hands its state to) while the leaf still holds its first
uncopied message; the loss then comes."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import nats
import nats.errors
import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from airflow_provider_jetstream.compat import AirflowFailException
from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.sensors.retention_headroom import JetStreamRetentionHeadroomSensor
from airflow_provider_jetstream.testing.servers import USERS
from tests.dags.sensors_retention_headroom import dag as headroom_dag
from tests.support.natsutil import LEAF_API, connect, unique
from tests.support.reconcile_dags import xcom
from tests.support.triggers import first_event, rebuild
from tests.support.waiting import Later, eventually, scaled, wait_until

#: The cut leaf's stream: at most this many messages, the oldest discarded first.
MAX_MSGS = 400
#: Messages per second published on the leaf (a pause after each: never faster, whatever the machine).
RATE = 40.0
#: The sensor's threshold: with nothing uncopied the leaf has MAX_MSGS / RATE = 10 s before loss.
MIN_TIME_TO_LOSS = 4.0


async def leaf_origin_and_hub_aggregate(hub_url: str, leaf_url: str, origin: str, **limits: Any) -> str:
    """A leaf stream with ``limits`` and a hub stream sourcing it (and, with ``away``, a second origin in a
    domain that never answers: a leaf away that keeps the sensor waiting without failing it)."""
    away = limits.pop("away", False)
    leaf = await connect(leaf_url)
    await leaf.jetstream().add_stream(StreamConfig(name=origin, subjects=[f"{origin}.>"], **limits))
    await leaf.close()
    sources = [StreamSource(name=origin, external=LEAF_API)]
    if away:
        sources.append(StreamSource(name=f"{origin}_away", external=ExternalStream(api="$JS.away.API")))
    hub = await connect(hub_url)
    aggregate = f"{origin}_agg"
    await hub.jetstream().add_stream(StreamConfig(name=aggregate, sources=sources))
    await hub.close()
    return aggregate


async def publish_on_leaf(url: str, subject: str, count: int) -> None:
    """``count`` messages ``r0``, ``r1``... on ``subject``, published to the leaf directly."""
    leaf = await connect(url)
    for i in range(count):
        await leaf.jetstream().publish(subject, f"r{i}".encode())
    await leaf.close()


def test_a_healthy_copy_passes_with_its_headroom_reported(hub_leaf, hub_conn) -> None:
    origin = unique("room")
    aggregate = asyncio.run(
        leaf_origin_and_hub_aggregate(
            hub_leaf.url("hub"), hub_leaf.url("leaf"), origin, max_msgs=1_000_000, max_age=3600
        )
    )

    asyncio.run(publish_on_leaf(hub_leaf.url("leaf"), f"{origin}.r", 20))
    hook = JetStreamHook(hub_conn, domain="hub")
    check = wait_until(
        lambda: hook.retention_headroom(aggregate, min_time_to_loss="1m"), lambda c: c.caught_up, what="caught up"
    )
    (headroom,) = check.headroom.values()
    assert (headroom.uncopied_msgs, headroom.oldest_age, headroom.first_uncopied_seq) == (0, None, None)
    # Nothing uncopied: every limit's whole room is left.
    assert {item.limit: item.room for item in headroom.limits} == {"max_age": 3600, "max_msgs": 1_000_000}
    assert check.low_headroom == () and "Time to loss" in check.table()

    sensor = JetStreamRetentionHeadroomSensor(
        task_id="headroom", jetstream_conn_id=hub_conn, domain="hub", stream=aggregate, min_time_to_loss="1m"
    )
    result = sensor.poke({})
    assert result and result.xcom_value["low_headroom"] == []
    (reported,) = result.xcom_value["origins"]
    assert reported["headroom"]["uncopied_msgs"] == 0 and reported["headroom"]["time_to_loss"] > 60
    # The trigger (serialized, rebuilt, run as the triggerer does) makes the same check.
    event = asyncio.run(first_event(sensor.trigger(), timeout=scaled(30)))
    assert event.payload["status"] == "success"
    assert event.payload["replication"]["origins"][0]["headroom"]["uncopied_msgs"] == 0


class LeafPublisher(threading.Thread):
    """Publishes to the leaf directly (not through the hub) at most :data:`RATE` messages a second, across
    the leaf's restart when it is cut off, until stopped."""

    def __init__(self, url: str, subject: str) -> None:
        super().__init__(daemon=True)
        self.url, self.subject = url, subject
        self.published = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._publish())
        except BaseException as err:  # re-raised by stop()
            self.error = err

    async def _publish(self) -> None:
        async def restarting(err: Exception) -> None:  # the leaf's restart: reconnects follow
            pass

        nc = await nats.connect(
            self.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1, connect_timeout=5, error_cb=restarting
        )
        js = nc.jetstream()
        clock = asyncio.get_running_loop().time
        started = clock()
        try:
            while not self.stopping.is_set():
                try:
                    await js.publish(self.subject, f"r{self.published}".encode(), timeout=2)
                    self.published += 1
                except (nats.errors.Error, asyncio.TimeoutError):
                    pass  # the leaf restarting: publish again once it is back
                # On schedule: message n is due at n / RATE s, however long the publishes took (a busy machine);
                # after a stall (the leaf restarting, a starved thread) on from now, not in a burst that would
                # fill the leaf faster than any rate the sensor measured.
                behind = clock() - (started + (self.published + 1) / RATE)
                if behind > 0.5:
                    started += behind
                await asyncio.sleep(max(0.0, started + (self.published + 1) / RATE - clock()))
        finally:
            await nc.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(scaled(30))
        if self.error:
            raise self.error


def test_a_cut_leaf_fails_the_sensor_before_its_first_uncopied_message_is_discarded(
    make_topology, jetstream_conn
) -> None:
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password, connect_timeout=2)
    origin = unique("room")
    aggregate = asyncio.run(
        leaf_origin_and_hub_aggregate(topology.url("hub"), topology.url("leaf"), origin, max_msgs=MAX_MSGS, away=True)
    )
    publisher = LeafPublisher(topology.url("leaf"), f"{origin}.r")
    publisher.start()

    async def copied() -> int:
        """The highest leaf sequence the hub holds (the source copies every message, in order, from seq 1)."""
        hub = await connect(topology.url("hub"))
        try:
            info = await JetStreamApi(hub, "$JS.hub.API").stream_info(aggregate)
            return int(info["state"]["messages"])
        finally:
            await hub.close()

    async def leaf_first_seq() -> int:
        leaf = await connect(topology.url("leaf"))
        try:
            return (await leaf.jetstream().stream_info(origin)).state.first_seq
        finally:
            await leaf.close()

    sensor = JetStreamRetentionHeadroomSensor(
        task_id="headroom",
        jetstream_conn_id=conn_id,
        domain="hub",
        stream=aggregate,
        min_time_to_loss=MIN_TIME_TO_LOSS,
        unreachable_origins="wait",  # the origin in 'away' never answers: the sensor keeps checking
        poke_interval=0.3,
    )
    try:
        assert asyncio.run(eventually(copied, lambda n: n >= 20)) >= 20
        # Linked: the hub copies as the leaf receives; 10 s of headroom > 4 s, and the leaf 'away' (never
        # measured) does not fail it either. The sensor measures the rate between its checks.
        started = time.monotonic()
        while time.monotonic() - started < 3:
            assert not sensor.poke({}), "an origin in 'away' never answers: the sensor cannot be done"
            time.sleep(0.3)
        assert publisher.published < MAX_MSGS  # nothing discarded yet: the leaf holds every message from seq 1
        # The deferred path: the trigger the sensor would defer to, its state (the headroom measured so far)
        # handed over through serialization, as the triggerer gets it.
        trigger = rebuild(sensor.trigger())

        async def deferred_check() -> tuple[dict, int, int]:
            events = trigger.run()
            try:
                event = await asyncio.wait_for(anext(events), scaled(60))
            finally:
                await events.aclose()
            return event.payload, await copied(), await leaf_first_seq()

        topology.disconnect_leaf("leaf")  # the leaf keeps receiving, the hub can no longer ask it
        cut_at = time.monotonic()
        deferred = Later(deferred_check)
        deferred.start()
        with pytest.raises(AirflowFailException) as failure:
            while time.monotonic() - cut_at < scaled(60):
                sensor.poke({})
                time.sleep(0.3)
        failed_after = time.monotonic() - cut_at
        held, first_seq = asyncio.run(copied()), asyncio.run(leaf_first_seq())
        # The sensor failed while the leaf still held the first message the hub has not copied.
        assert first_seq <= held + 1, (first_seq, held)
        message = str(failure.value)
        assert "low retention headroom" in message and "max_msgs discards the first uncopied message" in message
        assert "last known headroom" in message and f"source {origin!r} in leaf" in message
        assert f"{origin}_away" not in message  # the leaf never measured is not judged
        # The trigger, which never reached the leaf itself, failed the same way, also before the loss.
        event, deferred_held, deferred_first_seq = deferred.finish(60)
        assert (event["status"], event["reason"]) == ("error", "low_headroom"), event
        assert "max_msgs discards the first uncopied message" in event["message"]
        assert deferred_first_seq <= deferred_held + 1, (deferred_first_seq, deferred_held)
        # ... and the loss it foresaw does come: the leaf's limit discards that message soon after.
        assert asyncio.run(eventually(leaf_first_seq, lambda seq: seq > held + 1, timeout=60)) > held + 1
        print(f"failed {failed_after:.1f}s after the cut, the loss came {time.monotonic() - cut_at:.1f}s after it")
    finally:
        publisher.stop()


def test_the_next_dag_run_judges_a_cut_leaf_by_the_last_runs_headroom_and_says_since_when(
    airflow_db, make_topology, jetstream_conn
) -> None:
    """Run 1 measures the leaf's headroom (max_age 1 h: below min_time_to_loss 2 h, a warning); the leaf is cut;
    run 2 cannot ask it, and judges it by run 1's figures projected to now (kept in run 1's XCom), saying when
    they were measured and since when the leaf does not answer. Without them run 2 would know nothing."""
    topology = make_topology(leaf_domains=["leaf"])
    user, password = USERS["ACC"]
    conn_id = jetstream_conn(f"127.0.0.1:{topology.hub.port}", login=user, password=password, connect_timeout=2)
    origin = unique("room")
    aggregate = asyncio.run(
        leaf_origin_and_hub_aggregate(topology.url("hub"), topology.url("leaf"), origin, max_age=3600)
    )

    asyncio.run(publish_on_leaf(topology.url("leaf"), f"{origin}.r", 20))
    conf = {"conn_id": conn_id, "stream": aggregate}
    first = headroom_dag.test(run_conf=conf)
    assert first.get_task_instance("headroom").state == "success"
    (seen,) = xcom(first, "headroom")["origins"]
    assert seen["headroom"]["last_known"] is False
    measured = seen["headroom"]["measured_at"]

    topology.disconnect_leaf("leaf")
    second = headroom_dag.test(run_conf=conf)
    assert second.get_task_instance("headroom").state == "success"  # unreachable_origins="proceed"
    report = xcom(second, "headroom")
    assert [u["origin"] for u in report["unreachable"]] == [origin]
    (judged,) = report["origins"]
    assert (judged["headroom"]["last_known"], judged["headroom"]["measured_at"]) == (True, measured)
    assert judged["headroom"]["unreachable_since"] is not None
    (low,) = report["low_headroom"]
    assert f"last known headroom measured {measured}" in low and "unreachable since 20" in low, low
