"""``JetStreamKeyValueSensor`` through ``dag.test()``: a key set later in the leaf, read through the hub."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import KeyValueConfig

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.sensors.kv import JetStreamKeyValueSensor
from tests.dags import sensors_kv as dags
from tests.support.logs import LogLines, captured_logs
from tests.support.natsutil import connect, hub_mirror_bucket, unique
from tests.support.waiting import Later


async def create_leaf_bucket(url: str, bucket: str) -> None:
    nc = await connect(url)
    await nc.jetstream().create_key_value(KeyValueConfig(bucket=bucket))
    await nc.close()


def put_later(url: str, bucket: str, key: str, values: list[bytes], logs: LogLines) -> Later:
    """In the background, once the sensor found the key absent (it is waiting): put each value, the next one
    only once the sensor (or its trigger) judged the one before and logged that it keeps waiting."""

    async def put() -> int:
        await logs.wait_for(f"key {key!r} is absent", timeout=60)
        nc = await connect(url)
        kv = await nc.jetstream().key_value(bucket)
        for value in values:
            revision = await kv.put(key, value)
            if value != values[-1]:
                await logs.wait_for(f"key {key!r} is {value!r} at revision", timeout=60)
        await nc.close()
        return revision

    worker = Later(put)
    worker.start()
    return worker


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
def test_key_set_later_in_the_leaf_is_read_through_the_hub(airflow_db, hub_leaf, hub_conn, mode) -> None:
    bucket = unique("kvs")
    asyncio.run(create_leaf_bucket(hub_leaf.url("leaf"), bucket))
    with captured_logs() as logs:
        writer = put_later(hub_leaf.url("leaf"), bucket, "ready", [b"not-yet", b"go"], logs)
        run = getattr(dags, f"sensors_kv_{mode}").test(
            run_conf={"conn_id": hub_conn, "domain": "leaf", "bucket": bucket, "key": "ready", "value": "go"}
        )
        revision = writer.finish()
    ti = run.get_task_instance("wait_for_key")
    assert ti.state == "success"
    assert ti.xcom_pull(task_ids="wait_for_key") == {
        "bucket": bucket,
        "key": "ready",
        "target": "domain 'leaf'",
        "value": "go",
        "encoding": "utf-8",
        "revision": revision,
    }


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
@pytest.mark.parametrize("soft_fail", [False, True])
def test_missing_bucket_fails_at_once_or_is_skipped(airflow_db, hub_leaf, hub_conn, mode, soft_fail) -> None:
    dag = getattr(dags, f"sensors_kv_{mode}" + ("_soft_fail" if soft_fail else ""))
    run = dag.test(run_conf={"conn_id": hub_conn, "domain": "leaf", "bucket": unique("kvs"), "key": "k"})
    assert run.get_task_instance("wait_for_key").state == ("skipped" if soft_fail else "failed")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bucket": "a.b"}, "bucket='a.b' is not allowed: a bucket name"),
        ({"bucket": "a@b"}, "bucket='a@b' is not allowed: a bucket name"),
        ({"key": ".hidden"}, "key='.hidden' is not allowed: a key uses"),
        ({"key": "a b"}, "key='a b' is not allowed: a key uses"),
        ({"key": "orders.>"}, "key='orders.>' is not allowed: a key uses"),
        ({"after_revision": -1}, "after_revision=-1 is not allowed"),
    ],
)
def test_bad_arguments_are_refused_when_the_dag_is_parsed(kwargs, message) -> None:
    with pytest.raises(JetStreamConfigError, match=message):
        JetStreamKeyValueSensor(**{"task_id": "t", "bucket": "b", "key": "k", **kwargs})


@pytest.mark.parametrize("mode", ["poke", "deferrable"])
def test_key_in_a_hub_mirror_of_a_leaf_bucket_made_as_nats_go_makes_it(airflow_db, hub_leaf, hub_conn, mode) -> None:
    """The mirror keeps the origin's subjects ($KV.<origin>.<key>, ADR-8): the sensor finds the key there."""
    origin, copy = unique("kvo"), unique("kvm")
    asyncio.run(create_leaf_bucket(hub_leaf.url("leaf"), origin))
    asyncio.run(hub_mirror_bucket(hub_leaf, copy, origin, legacy=False))
    with captured_logs() as logs:
        writer = put_later(hub_leaf.url("leaf"), origin, "ready", [b"not-yet", b"go"], logs)
        run = getattr(dags, f"sensors_kv_{mode}").test(
            run_conf={"conn_id": hub_conn, "domain": "hub", "bucket": copy, "key": "ready", "value": "go"}
        )
        revision = writer.finish()
    ti = run.get_task_instance("wait_for_key")
    assert ti.state == "success"
    assert ti.xcom_pull(task_ids="wait_for_key") == {
        "bucket": copy,
        "key": "ready",
        "target": "domain 'hub'",
        "value": "go",
        "encoding": "utf-8",
        "revision": revision,
    }
