"""``JetStreamReplicationLagSensor`` through ``dag.test()``: a hub mirror of a leaf stream, in each mode."""

from __future__ import annotations

import asyncio
import time

import pytest
from airflow import __version__ as AIRFLOW_VERSION_TEXT
from nats.js.api import StreamConfig, StreamSource

from airflow_provider_jetstream.compat import AIRFLOW_V_3_3_PLUS, AirflowVersionError
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.sensors.replication_lag import JetStreamReplicationLagSensor, ReplicationOptions
from tests.dags import sensors_replication_lag as dags
from tests.support.logs import captured_logs
from tests.support.natsutil import LEAF_API, connect, leaf_stream_with_messages, unique
from tests.support.waiting import Later


async def hub_mirror(url: str, origin: str) -> str:
    nc = await connect(url)
    mirror = f"{origin}_mirror"
    await nc.jetstream().add_stream(StreamConfig(name=mirror, mirror=StreamSource(name=origin, external=LEAF_API)))
    await nc.close()
    return mirror


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_sensor_returns_the_replication_report_once_caught_up(airflow_db, hub_leaf, hub_conn, mode) -> None:
    origin = unique("reps")
    asyncio.run(leaf_stream_with_messages(hub_leaf.url("leaf"), origin, 7))
    mirror = asyncio.run(hub_mirror(hub_leaf.url("hub"), origin))
    run = getattr(dags, f"sensors_replication_lag_{mode}").test(
        run_conf={"conn_id": hub_conn, "domain": "hub", "stream": mirror}
    )
    ti = run.get_task_instance("wait_for_replication")
    assert ti.state == "success"
    report = ti.xcom_pull(task_ids="wait_for_replication")
    assert (report["stream"], report["target"], report["messages"], report["caught_up"]) == (
        mirror,
        "domain 'hub'",
        7,
        True,
    )
    (status,) = report["origins"]
    assert (status["kind"], status["origin"], status["domain"], status["lag"], status["error"]) == (
        "mirror",
        origin,
        "leaf",
        0,
        None,
    )


def test_deferrable_sensor_waits_through_an_error_within_grace_until_caught_up(airflow_db, hub_leaf, hub_conn) -> None:
    """The mirror is created before its origin: "stream not found" until the origin appears, then it catches up."""
    origin = unique("reps")
    mirror = asyncio.run(hub_mirror(hub_leaf.url("hub"), origin))

    async def create_the_origin_once_the_sensor_waits() -> None:
        await logs.wait_for(f"Stream {mirror!r}: waiting:", timeout=60)  # it checked without the origin, and waits
        await leaf_stream_with_messages(hub_leaf.url("leaf"), origin, 5)

    with captured_logs() as logs:
        creator = Later(create_the_origin_once_the_sensor_waits)
        creator.start()
        run = dags.sensors_replication_lag_deferrable.test(
            run_conf={"conn_id": hub_conn, "domain": "hub", "stream": mirror}
        )
        creator.finish()
    ti = run.get_task_instance("wait_for_replication")
    assert ti.state == "success"
    report = ti.xcom_pull(task_ids="wait_for_replication")
    assert (report["messages"], report["origins"][0]["lag"], report["origins"][0]["error"]) == (5, 0, None)


async def aggregate_of_a_missing_origin(url: str, aggregate: str) -> None:
    nc = await connect(url)
    source = StreamSource(name=f"{aggregate}_missing", external=LEAF_API)
    await nc.jetstream().add_stream(StreamConfig(name=aggregate, sources=[source]))
    await nc.close()


def test_replication_error_beyond_grace_fails_the_task(airflow_db, hub_leaf, hub_conn) -> None:
    aggregate = unique("reps")
    asyncio.run(aggregate_of_a_missing_origin(hub_leaf.url("hub"), aggregate))
    run = dags.sensors_replication_lag_error.test(run_conf={"conn_id": hub_conn, "domain": "hub", "stream": aggregate})
    assert run.get_task_instance("wait_for_replication").state == "failed"


@pytest.mark.parametrize("soft_fail", [False, True])
def test_rescheduled_sensor_confirms_an_error_within_one_poke(hub_leaf, hub_conn, soft_fail) -> None:
    """Each reschedule is a new sensor object, so the grace period is measured inside the poke."""
    from airflow_provider_jetstream.compat import AirflowFailException, AirflowSkipException

    aggregate = unique("reps")
    asyncio.run(aggregate_of_a_missing_origin(hub_leaf.url("hub"), aggregate))
    sensor = JetStreamReplicationLagSensor(
        task_id="t",
        jetstream_conn_id=hub_conn,
        domain="hub",
        stream=aggregate,
        options={"error_grace": "1s"},
        mode="reschedule",
        poke_interval=0.3,
        soft_fail=soft_fail,
    )
    expected = AirflowSkipException if soft_fail else AirflowFailException
    with pytest.raises(expected, match=f"source '{aggregate}_missing' in leaf reports a replication error"):
        for _ in range(20):  # the server reports the error a moment after the stream is created
            started = time.monotonic()
            assert sensor.poke({}) is False
            time.sleep(0.5)
    assert time.monotonic() - started >= 1.0  # the failing poke itself waited out the grace period


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_inactive": "soon"}, "max_inactive='soon' is not allowed: use seconds \\(30\\)"),
        ({"error_grace": -3}, "error_grace=-3 is not allowed: use a non-negative duration"),
        ({"max_lag": 1.5}, "max_lag=1.5 is not allowed"),
        ({"origins": "orders"}, "origins='orders' is not allowed: use a non-empty list"),
        ({"origins": ["ok", "bad name"]}, "origins='bad name' is not allowed: a stream name"),
        # issue #10: max_inactive=0 could never succeed (every origin is "silent")
        ({"max_inactive": 0}, "max_inactive=0 is not allowed: use a positive duration"),
        ({"max_inactive": "0s"}, "max_inactive='0s' is not allowed: use a positive duration"),
        ({"verify_origin": "maybe"}, "verify_origin='maybe' is not allowed: use one of 'auto', 'required', 'off'"),
        ({"unreachable_origins": "skip"}, "unreachable_origins='skip' is not allowed: use one of 'wait', 'proceed'"),
        ({"unreachable_timeout": "soon"}, "unreachable_timeout='soon' is not allowed"),
        ({"unreachable_timeout": 0}, "unreachable_timeout=0 is not allowed: use a positive duration"),
    ],
)
def test_bad_arguments_are_refused_when_the_dag_is_parsed(kwargs, message) -> None:
    # How an origin is judged is the sensor's options (ReplicationOptions); the rest its own arguments.
    options = {k: v for k, v in kwargs.items() if k in ReplicationOptions.arguments.args}
    own = {k: v for k, v in kwargs.items() if k not in options}
    with pytest.raises(JetStreamConfigError, match=message):
        JetStreamReplicationLagSensor(task_id="t", stream="agg", **own, **({"options": options} if options else {}))


def test_durations_may_be_templated_and_are_checked_once_rendered() -> None:
    sensor = JetStreamReplicationLagSensor(task_id="t", stream="agg", options={"max_inactive": "{{ params.silence }}"})
    sensor.options = {"max_inactive": "45s"}  # what rendering the template gives
    sensor.validate()
    assert sensor.max_inactive_seconds == 45.0 and sensor.new_watch().max_inactive == 45.0
    sensor.options = {"max_inactive": "soon"}
    with pytest.raises(JetStreamConfigError, match="max_inactive='soon' is not allowed"):
        sensor.validate()


@pytest.mark.parametrize(
    "sources",
    [["{{ params.origin }}"], ["fixed", "{{ params.origin }}"], ("{{ params.origin }}",)],
)
def test_templates_inside_lists_are_left_for_rendering(sources) -> None:
    """issue #10: the template detector looks inside lists and dicts."""
    sensor = JetStreamReplicationLagSensor(task_id="t", stream="agg", origins=sources)
    sensor.origins = ["orders"]  # what rendering gives
    sensor.validate()


def test_templated_unreachable_timeout_is_checked_once_rendered() -> None:
    from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time as templated

    assert templated({"a": ["{{ x }}"]}) and templated(("{{ x }}",)) and not templated(["a", 1, None])
    sensor = JetStreamReplicationLagSensor(task_id="t", stream="agg", unreachable_timeout="{{ params.t }}")
    assert sensor.unreachable_timeout == "{{ params.t }}"


def test_the_trigger_refuses_bad_policies_too() -> None:
    from airflow_provider_jetstream.triggers.replication_lag import JetStreamReplicationLagTrigger

    with pytest.raises(JetStreamConfigError, match="max_inactive=0 is not allowed"):
        JetStreamReplicationLagTrigger("c", "agg", options={"max_inactive": 0})
    with pytest.raises(JetStreamConfigError, match="verify_origin='yes' is not allowed"):
        JetStreamReplicationLagTrigger("c", "agg", options={"verify_origin": "yes"})


def test_rescheduled_sensor_keeps_its_state_across_pokes_in_airflow(airflow_db, hub_leaf, hub_conn) -> None:
    """Each reschedule is a new process: since when the domain has not answered lives in Airflow's
    task state store, so unreachable_timeout (2 s) ends the wait long before the timeout (120 s). Before
    Airflow 3.3 (no task state store) the sensor refuses it when the DAG is parsed."""
    if not AIRFLOW_V_3_3_PLUS:
        with pytest.raises(AirflowVersionError) as refused:
            JetStreamReplicationLagSensor(task_id="t", stream="s", unreachable_timeout="2s", mode="reschedule")
        assert str(refused.value).startswith(
            f'unreachable_timeout with mode="reschedule" is not allowed on Airflow {AIRFLOW_VERSION_TEXT}: it '
            "needs Airflow 3.3 or newer"
        )
        JetStreamReplicationLagSensor(task_id="t", stream="s", unreachable_timeout="2s")  # poke mode: its own state
        return
    started = time.monotonic()
    run = dags.sensors_replication_lag_unreachable_reschedule.test(
        run_conf={"conn_id": hub_conn, "domain": "nowhere", "stream": unique("reps")}
    )
    assert run.get_task_instance("wait_for_replication").state == "failed"
    assert time.monotonic() - started < 60
