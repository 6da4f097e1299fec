"""``JetStreamConsumerLagSensor`` through ``dag.test()`` in poke, reschedule and deferrable modes."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.sensors.consumer_lag import JetStreamConsumerLagSensor
from airflow_provider_jetstream.triggers.consumer_lag import JetStreamConsumerLagTrigger
from tests.dags import sensors_consumer_lag as dags
from tests.support.logs import LogLines, captured_logs
from tests.support.natsutil import connect, leaf_stream_with_consumer, unique
from tests.support.waiting import Later


def ack_all_but_one_then_last(url: str, stream: str, count: int, logs: LogLines) -> Later:
    """In the background, once the sensor is waiting on the unprocessed messages: fetch ``count`` messages, ack all
    but one, and once the sensor (or its trigger) saw that one unacked and kept waiting, ack it; return its time."""

    async def work() -> datetime:
        await logs.wait_for(f"waiting: unprocessed (num_pending) {count} > max_unprocessed 0", timeout=60)
        nc = await connect(url)
        sub = await nc.jetstream().pull_subscribe_bind("worker", stream)
        msgs = await sub.fetch(count, timeout=5)
        for msg in msgs[:-1]:
            await msg.ack_sync()
        await logs.wait_for("waiting: outstanding acks (num_ack_pending) 1 > max_outstanding_acks 0", timeout=60)
        last_ack = datetime.now(timezone.utc)
        await msgs[-1].ack_sync()
        await nc.close()
        return last_ack

    worker = Later(work)
    worker.start()
    return worker


@pytest.mark.parametrize("mode", ["poke", "reschedule", "deferrable"])
def test_sensor_succeeds_only_after_the_last_ack(airflow_db, hub_leaf, hub_conn, mode) -> None:
    stream = unique("cls")
    asyncio.run(leaf_stream_with_consumer(hub_leaf.url("leaf"), stream, 4))
    dag = getattr(dags, f"sensors_consumer_lag_{mode}")
    with captured_logs() as logs:
        worker = ack_all_but_one_then_last(hub_leaf.url("leaf"), stream, 4, logs)
        run = dag.test(run_conf={"conn_id": hub_conn, "domain": "leaf", "stream": stream, "consumer": "worker"})
        last_ack = worker.finish()
    ti = run.get_task_instance("wait_for_consumer")
    assert (run.state, ti.state) == ("success", "success")
    assert ti.end_date >= last_ack
    xcom = ti.xcom_pull(task_ids="wait_for_consumer")
    assert {k: xcom[k] for k in ("stream", "consumer", "target", "num_pending", "num_ack_pending")} == {
        "stream": stream,
        "consumer": "worker",
        "target": "domain 'leaf'",
        "num_pending": 0,
        "num_ack_pending": 0,
    }
    assert xcom["delivered"] == xcom["ack_floor"] == {"consumer_seq": 4, "stream_seq": 4}
    if mode == "reschedule":
        assert reschedules(ti) >= 1  # it gave its worker slot back between pokes


def reschedules(ti) -> int:
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(select(func.count(TaskReschedule.id)).where(TaskReschedule.ti_id == ti.id))


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
@pytest.mark.parametrize("soft_fail", [False, True])
def test_missing_consumer_fails_at_once_or_is_skipped(airflow_db, hub_leaf, hub_conn, mode, soft_fail) -> None:
    stream = unique("cls")
    asyncio.run(leaf_stream_with_consumer(hub_leaf.url("leaf"), stream, 0))
    dag = getattr(dags, f"sensors_consumer_lag_{mode}" + ("_soft_fail" if soft_fail else ""))
    run = dag.test(run_conf={"conn_id": hub_conn, "domain": "leaf", "stream": stream, "consumer": "nope"})
    ti = run.get_task_instance("wait_for_consumer")
    assert ti.state == ("skipped" if soft_fail else "failed")
    # It did not wait: one try, never deferred or rescheduled (a wall-clock bound fails on a busy machine).
    assert ti.try_number == 1 and ti.next_method is None and reschedules(ti) == 0


def test_deferrable_sensor_defers_with_the_sensor_timeout_and_a_json_trigger(hub_leaf, hub_conn) -> None:
    from tests.support.airflow_names import TaskDeferred

    stream = unique("cls")
    asyncio.run(leaf_stream_with_consumer(hub_leaf.url("leaf"), stream, 2))
    sensor = JetStreamConsumerLagSensor(
        task_id="t",
        jetstream_conn_id=hub_conn,
        domain="leaf",
        stream=stream,
        consumer="worker",
        deferrable=True,
        timeout=123,
        poke_interval=7,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context={})
    assert deferred.value.timeout.total_seconds() == 123
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, JetStreamConsumerLagTrigger)
    assert trigger.serialize()[1] == {
        "jetstream_conn_id": hub_conn,
        "stream": stream,
        "consumer": "worker",
        "domain": "leaf",
        "api_prefix": None,
        "max_unprocessed": 0,
        "max_outstanding_acks": 0,
        "max_redelivered": None,
        "poll_interval": 7.0,
        "unreachable_timeout": None,
        "state": {},
    }


def test_deferrable_defaults_to_the_airflow_setting(monkeypatch) -> None:
    import importlib

    import airflow_provider_jetstream.sensors.base as base
    import airflow_provider_jetstream.sensors.consumer_lag as module

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    from airflow_provider_jetstream.compat import conf

    assert conf.getboolean("operators", "default_deferrable")
    importlib.reload(base)
    reloaded = importlib.reload(module)
    try:
        assert reloaded.JetStreamConsumerLagSensor(task_id="t", stream="s", consumer="c").deferrable is True
    finally:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE")
        importlib.reload(base)
        importlib.reload(module)
    assert module.JetStreamConsumerLagSensor(task_id="t", stream="s", consumer="c").deferrable is False


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stream": "a.b"}, "stream='a.b' is not allowed: a stream name"),
        ({"consumer": "x y"}, "consumer='x y' is not allowed: a consumer name"),
        ({"max_unprocessed": -1}, "max_unprocessed=-1 is not allowed: use an integer >= 0"),
        ({"max_redelivered": "3"}, "max_redelivered='3' is not allowed: use an integer >= 0 or None"),
        ({"domain": "leaf", "api_prefix": "JS.acc@hub.API"}, "were both given"),
    ],
)
def test_bad_arguments_are_refused_when_the_dag_is_parsed(kwargs, message) -> None:
    arguments = {"task_id": "t", "stream": "s", "consumer": "c", **kwargs}
    with pytest.raises(JetStreamConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        JetStreamConsumerLagSensor(**arguments)


@pytest.mark.parametrize(
    ("reason", "soft_fail", "raised"),
    [
        ("not_found", False, "AirflowFailException"),
        ("replication_error", True, "AirflowSkipException"),
        ("invalid", False, "AirflowFailException"),
        ("error", False, "JetStreamError"),  # a connection failure: Airflow's retries apply
        ("error", True, "JetStreamError"),
    ],
)
def test_trigger_errors_fail_like_poke_mode(reason, soft_fail, raised) -> None:
    sensor = JetStreamConsumerLagSensor(task_id="t", stream="s", consumer="c", soft_fail=soft_fail)
    with pytest.raises(Exception, match="the message") as err:
        sensor.execute_complete({}, {"status": "error", "reason": reason, "message": "the message"})
    assert type(err.value).__name__ == raised
    event = {"status": "success", "consumer": {"num_pending": 0}}
    assert sensor.execute_complete({}, event) == {"num_pending": 0}
