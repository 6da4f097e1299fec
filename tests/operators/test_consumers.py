"""Durable pull consumer operators against real servers."""

from __future__ import annotations

import asyncio

import nats
import pytest

from airflow_provider_jetstream.core.errors import JetStreamNotFoundError, ReconcileError, SpecErrors
from airflow_provider_jetstream.operators.consumers import (
    JetStreamCreateConsumerOperator,
    JetStreamDeleteConsumerOperator,
)
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.management import uid

S = 1_000_000_000


def consumer(conn: str, stream: str, spec: dict, **kwargs) -> dict:
    return JetStreamCreateConsumerOperator(
        task_id=uid("c"), jetstream_conn_id=conn, domain="leaf", stream=stream, consumer=spec, **kwargs
    ).execute({})


@pytest.fixture
def stream(raw) -> str:
    name = uid()
    raw.create("leaf", {"name": name, "subjects": [f"{name}.*"]})
    raw.publish(f"{name}.a", [b"1", b"2"], server="leaf")
    return name


def test_consumer_reconcile_outcomes(hub_conn, raw, stream) -> None:
    spec = {
        "name": "dur",
        "ack_policy": "explicit",
        "ack_wait": "10s",
        "max_deliver": 5,
        "backoff": ["1s", "5s"],
        "filter_subject": f"{stream}.*",
        "deliver_policy": "all",
        "max_ack_pending": 100,
        "inactive_threshold": "1h",
        "metadata": {"owner": "airflow"},
    }
    spec.pop("ack_wait")  # with backoff, backoff[0] is the ack wait
    created = consumer(hub_conn, stream, spec)
    assert created["action"] == "created" and created["state"]["num_pending"] == 2 and created["stream"] == stream
    info = raw.api("leaf", f"CONSUMER.INFO.{stream}.dur")["config"]
    assert info["backoff"] == [S, 5 * S] and info["max_deliver"] == 5 and info["metadata"]["owner"] == "airflow"

    unchanged = consumer(hub_conn, stream, spec)
    assert unchanged["action"] == "unchanged" and unchanged["requests"] == 1

    updated = consumer(
        hub_conn, stream, {**spec, "max_ack_pending": 50, "filter_subjects": [f"{stream}.a"], "filter_subject": None}
    )
    assert updated["action"] == "updated" and set(updated["changes"]) == {"max_ack_pending", "filter_subjects"}
    info = raw.api("leaf", f"CONSUMER.INFO.{stream}.dur")["config"]
    assert info["max_ack_pending"] == 50 and info["metadata"]["owner"] == "airflow"

    with pytest.raises(ReconcileError, match=r"deliver_policy: 'all' -> 'new'"):
        consumer(hub_conn, stream, {**spec, "deliver_policy": "new"})
    recreated = consumer(hub_conn, stream, {**spec, "deliver_policy": "new"}, if_exists="recreate")
    assert recreated["action"] == "recreated" and recreated["state"]["num_pending"] == 0

    skipped = consumer(hub_conn, stream, {**spec, "max_deliver": 9}, if_exists="skip")
    assert skipped["skipped"] and "max_deliver" in skipped["drift"]
    with pytest.raises(ReconcileError, match="if_exists='fail'"):
        consumer(hub_conn, stream, spec, if_exists="fail")
    planned = consumer(hub_conn, stream, {"name": "other"}, options={"dry_run": True})
    assert planned["action"] == "planned" and "error" in raw.api("leaf", f"CONSUMER.INFO.{stream}.other")


def test_consumer_on_missing_stream(hub_conn) -> None:
    with pytest.raises(JetStreamNotFoundError, match="does not exist in domain 'leaf': create it first"):
        consumer(hub_conn, uid("none"), {"name": "dur"})


def test_pause_until_judged_by_api_level(hub_conn, raw, stream) -> None:
    spec = {"name": "paused", "pause_until": "2099-01-01T00:00:00Z"}
    if raw.level("leaf") >= 1:
        result = consumer(hub_conn, stream, spec)
        assert result["action"] == "created" and result["state"]["paused"] is True
        assert consumer(hub_conn, stream, spec)["action"] == "unchanged"
    else:
        with pytest.raises(ReconcileError, match=r"consumer\.pause_until needs nats-server >= 2\.11; domain 'leaf'"):
            consumer(hub_conn, stream, spec)


def test_created_consumer_is_pullable(hub_conn, hub_leaf, stream) -> None:
    consumer(hub_conn, stream, {"name": "puller", "ack_wait": "30s"})

    async def pull() -> list[bytes]:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        try:
            sub = await nc.jetstream(domain="leaf").pull_subscribe_bind("puller", stream)
            msgs = await sub.fetch(2, timeout=15)
            for m in msgs:
                await m.ack()
            return [m.data for m in msgs]
        finally:
            await nc.close()

    assert asyncio.run(pull()) == [b"1", b"2"]


def test_delete_consumer_and_validation(hub_conn, raw, stream) -> None:
    consumer(hub_conn, stream, {"name": "gone"})
    op = JetStreamDeleteConsumerOperator(
        task_id="d", jetstream_conn_id=hub_conn, domain="leaf", stream=stream, consumer="gone"
    )
    assert op.execute({})["deleted"] is True and op.execute({})["deleted"] is False
    with pytest.raises(SpecErrors, match="push consumers are not managed here"):
        JetStreamCreateConsumerOperator(task_id="x", stream=stream, consumer={"name": "p", "deliver_subject": "x"})
    with pytest.raises(SpecErrors, match=r"consumer\.name='a b'"):
        JetStreamCreateConsumerOperator(task_id="x", stream=stream, consumer={"name": "a b"})
