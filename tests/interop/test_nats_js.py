"""What the operators create behaves for nats.js (npm ``nats`` 2.29) as if nats.js had created it.

Every test runs nats.js in Node against the shared hub + leaf topology (connected to the hub, as
user ACC) and asserts exact values. The reverse direction too: a bucket nats.js creates is read by
the provider's KV check, trigger and sensor, and written by its put operator.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.consumers import JetStreamCreateConsumerOperator
from airflow_provider_jetstream.operators.kv import (
    JetStreamCreateKeyValueOperator,
    JetStreamKeyValueDeleteOperator,
    JetStreamKeyValuePutOperator,
)
from airflow_provider_jetstream.operators.publish import JetStreamPublishOperator
from airflow_provider_jetstream.operators.streams import JetStreamCreateStreamOperator
from airflow_provider_jetstream.sensors.kv import JetStreamKeyValueSensor
from airflow_provider_jetstream.triggers.kv import JetStreamKeyValueTrigger
from tests.interop.conftest import NatsJs
from tests.operators.conftest import Raw, uid
from tests.triggers.natsutil import first_event


@pytest.fixture
def raw(hub_leaf) -> Raw:
    return Raw(hub_leaf)


def bucket(conn: str, spec: Any, domain: str, **kwargs: Any) -> dict:
    return JetStreamCreateKeyValueOperator(
        task_id=uid("b"), jetstream_conn_id=conn, domain=domain, bucket=spec, **kwargs
    ).execute({})


def put(conn: str, name: str, key: str, value: Any, domain: str) -> int:
    return JetStreamKeyValuePutOperator(
        task_id=uid("p"), jetstream_conn_id=conn, domain=domain, bucket=name, key=key, value=value
    ).execute({})


def entry(key: str, value: str, revision: int, operation: str = "PUT") -> dict:
    return {"key": key, "value": value, "revision": revision, "operation": operation}


def leaf_origin(conn: str) -> tuple[str, dict[str, int]]:
    """A bucket in the leaf with keys a=1, b=2 and a deleted key c, written by the put operator."""
    origin = uid("origin")
    bucket(conn, {"bucket": origin, "history": 5}, domain="leaf")
    revisions = {"a": put(conn, origin, "a", "1", "leaf"), "b": put(conn, origin, "b", "2", "leaf")}
    put(conn, origin, "c", "3", "leaf")
    JetStreamKeyValueDeleteOperator(
        task_id=uid("d"), jetstream_conn_id=conn, domain="leaf", bucket=origin, key="c"
    ).execute({})
    return origin, revisions


def caught_up(raw: Raw, domain: str, stream: str, last_seq: int, timeout: float = 20.0) -> dict:
    """The stream's info once a mirror or source has copied up to ``last_seq`` (its own numbering)."""
    deadline = time.monotonic() + timeout
    while True:
        info = raw.info(domain, stream)
        if info and info["state"]["last_seq"] >= last_seq:
            return info
        assert time.monotonic() < deadline, f"{stream} in {domain}: {info and info['state']} after {timeout}s"
        time.sleep(0.1)


def differences(ours: dict, theirs: dict) -> dict:
    """Fields (other than the stream name) whose values differ: ``{field: (ours, theirs)}``."""
    fields = (set(ours) | set(theirs)) - {"name"}
    return {f: (ours.get(f), theirs.get(f)) for f in sorted(fields) if ours.get(f) != theirs.get(f)}


# Where nats.js 2.29 departs from nats.go and ADR-8 ("Deny Delete is always set to true"; a duplicate
# window of 2 minutes, or max_age if shorter), the operator follows nats.go. Neither field changes
# where keys are or how a client reads them.
NATS_GO_NOT_NATS_JS = {"deny_delete": (True, False)}


def test_mirror_bucket_config_is_field_for_field_what_nats_js_creates(nats_js: NatsJs, hub_conn, raw) -> None:
    origin, _ = leaf_origin(hub_conn)
    by_js, by_operator = uid("js-copy"), uid("op-copy")
    nats_js.run("create-bucket", domain="hub", bucket=by_js, options={"mirror": {"name": origin, "domain": "leaf"}})
    bucket(hub_conn, {"bucket": by_operator, "mirror": {"bucket": origin, "domain": "leaf"}}, domain="hub")
    js_config = raw.info("hub", f"KV_{by_js}")["config"]
    op_config = raw.info("hub", f"KV_{by_operator}")["config"]
    assert js_config["mirror"] == {"name": f"KV_{origin}", "external": {"api": "$JS.leaf.API", "deliver": ""}}
    assert differences(op_config, js_config) == {
        **NATS_GO_NOT_NATS_JS,
        # nats.js sends no duplicate window and the server sets none on a mirror; nats.go sends 2m.
        "duplicate_window": (120_000_000_000, None),
    }
    assert op_config["mirror_direct"] is True and "subjects" not in op_config

    # A plain bucket with a history and a TTL: the same, but for the subjects that carry its name.
    plain_js, plain_op = uid("js-plain"), uid("op-plain")
    nats_js.run("create-bucket", domain="leaf", bucket=plain_js, options={"history": 5, "ttl": 3_600_000})
    bucket(hub_conn, {"bucket": plain_op, "history": 5, "ttl": "1h"}, domain="leaf")
    js_plain = raw.info("leaf", f"KV_{plain_js}")["config"]
    op_plain = raw.info("leaf", f"KV_{plain_op}")["config"]
    assert differences(op_plain, js_plain) == {
        **NATS_GO_NOT_NATS_JS,
        "subjects": ([f"$KV.{plain_op}.>"], [f"$KV.{plain_js}.>"]),
    }


def test_nats_js_reads_a_leaf_bucket_through_the_hub_by_domain(nats_js: NatsJs, hub_conn) -> None:
    origin, revisions = leaf_origin(hub_conn)
    watch = nats_js.start(
        "read", domain="leaf", bucket=origin, get=["a", "b", "c", "zz"], watch={"key": "b", "until": {"b": "22"}}
    )
    try:
        watch.wait_for("watching")
        later = put(hub_conn, origin, "b", "22", "leaf")
        result = watch.result()
    finally:
        watch.stop()
    assert result["get"]["a"] == entry("a", "1", revisions["a"])
    assert result["get"]["c"]["operation"] == "DEL" and result["get"]["zz"] is None
    assert result["keys"] == ["a", "b"]
    assert result["watch"]["entries"] == [entry("b", "2", revisions["b"]), entry("b", "22", later)]


def test_nats_js_reads_a_cross_domain_mirror_bucket_the_operator_made(nats_js: NatsJs, hub_conn, raw) -> None:
    origin, revisions = leaf_origin(hub_conn)
    copy = uid("copy")
    bucket(hub_conn, {"bucket": copy, "mirror": {"bucket": origin, "domain": "leaf"}}, domain="hub")
    caught_up(raw, "hub", f"KV_{copy}", 4)
    watch = nats_js.start(
        "read", domain="hub", bucket=copy, get=["a", "b", "c"], watch={"key": "a", "until": {"a": "11"}}
    )
    try:
        watch.wait_for("watching")
        # A put through the mirror goes to its origin in the leaf, and comes back by the mirror.
        later = put(hub_conn, copy, "a", "11", "hub")
        result = watch.result()
    finally:
        watch.stop()
    assert result["get"]["a"] == entry("a", "1", revisions["a"])
    assert result["get"]["b"] == entry("b", "2", revisions["b"])
    assert result["get"]["c"]["operation"] == "DEL"
    assert result["keys"] == ["a", "b"]
    assert result["status"]["values"] == 3  # history 1: the delete marker replaced c's value
    assert result["watch"]["entries"] == [entry("a", "1", revisions["a"]), entry("a", "11", later)]


def test_nats_js_reads_a_cross_domain_sourced_bucket(nats_js: NatsJs, hub_conn, raw) -> None:
    origin, _ = leaf_origin(hub_conn)
    agg = uid("agg")
    bucket(hub_conn, {"bucket": agg, "sources": [{"bucket": origin, "domain": "leaf"}]}, domain="hub")
    caught_up(raw, "hub", f"KV_{agg}", 4)
    watch = nats_js.start("read", domain="hub", bucket=agg, get=["a", "b"], watch={"until": {"b": "two"}})
    try:
        watch.wait_for("watching")
        put(hub_conn, origin, "b", "two", "leaf")
        result = watch.result()
    finally:
        watch.stop()
    # A sourced bucket numbers its own revisions: 1, 2 in the order the source delivered them.
    assert (result["get"]["a"]["value"], result["get"]["b"]["value"]) == ("1", "2")
    assert result["keys"] == ["a", "b"]
    seen = {(e["key"], e["value"], e["operation"]) for e in result["watch"]["entries"]}
    assert ("b", "two", "PUT") in seen and ("a", "1", "PUT") in seen


def test_nats_js_fetches_what_the_provider_published_to_a_leaf_stream(nats_js: NatsJs, hub_conn, raw) -> None:
    name = uid("orders")
    JetStreamCreateStreamOperator(
        task_id=uid("s"), jetstream_conn_id=hub_conn, domain="leaf", stream={"name": name, "subjects": [f"{name}.>"]}
    ).execute({})
    JetStreamCreateConsumerOperator(
        task_id=uid("c"), jetstream_conn_id=hub_conn, domain="leaf", stream=name, consumer={"name": "edge"}
    ).execute({})
    published = JetStreamPublishOperator(
        task_id=uid("pub"),
        jetstream_conn_id=hub_conn,
        domain="leaf",
        subject=f"{name}.new",
        messages=[{"id": 1}, "two", b"three"],
        msg_id="run-1/{index}",
    ).execute({})
    assert (published["stored"], published["first_seq"], published["last_seq"]) == (3, 1, 3)
    result = nats_js.run("fetch", domain="leaf", stream=name, consumer="edge", max=3)
    assert result["messages"] == [
        {"subject": f"{name}.new", "stream_seq": 1, "data": '{"id":1}', "msg_id": "run-1/0"},
        {"subject": f"{name}.new", "stream_seq": 2, "data": "two", "msg_id": "run-1/1"},
        {"subject": f"{name}.new", "stream_seq": 3, "data": "three", "msg_id": "run-1/2"},
    ]
    assert result["num_pending"] == 0
    deadline = time.monotonic() + 10  # nats.js acks without waiting for a reply
    while (consumer := raw.api("leaf", f"CONSUMER.INFO.{name}.edge"))["ack_floor"]["stream_seq"] < 3:
        assert time.monotonic() < deadline, consumer
        time.sleep(0.1)
    assert consumer["num_ack_pending"] == 0


def test_provider_reads_and_writes_a_mirror_bucket_nats_js_created(nats_js: NatsJs, hub_conn, raw, airflow_db) -> None:
    origin, revisions = leaf_origin(hub_conn)
    copy = uid("js-copy")
    nats_js.run("create-bucket", domain="hub", bucket=copy, options={"mirror": {"name": origin, "domain": "leaf"}})
    caught_up(raw, "hub", f"KV_{copy}", 4)
    hook = JetStreamHook(hub_conn, domain="hub")

    async def scenario() -> dict:
        seen: dict[str, Any] = {}
        seen["a"] = (await hook.acheck_key(copy, "a")).to_xcom()
        seen["c"] = (await hook.acheck_key(copy, "c")).reason
        trigger = JetStreamKeyValueTrigger(hub_conn, copy, "go", domain="hub", value="now")
        fired = asyncio.create_task(first_event(trigger, timeout=30))
        seen["revision"] = await asyncio.to_thread(put, hub_conn, copy, "go", "now", "hub")  # to the origin
        seen["event"] = (await fired).payload
        sensor = JetStreamKeyValueSensor(
            task_id=uid("s"), jetstream_conn_id=hub_conn, domain="hub", bucket=copy, key="go"
        )
        outcome = await sensor.trigger().step(hook)  # one poke's check
        seen["sensor"] = (outcome.status == "done", outcome.xcom)
        return seen

    seen = asyncio.run(scenario())
    assert seen["a"] == {
        "bucket": copy,
        "key": "a",
        "target": "domain 'hub'",
        "value": "1",
        "encoding": "utf-8",
        "revision": revisions["a"],
    }
    assert seen["c"].startswith("key 'c' is absent")
    assert seen["revision"] == 5  # the origin's revision: the put went to the leaf
    assert seen["event"]["status"] == "success"
    assert (seen["event"]["entry"]["value"], seen["event"]["entry"]["revision"]) == ("now", 5)
    assert seen["sensor"][0] is True and seen["sensor"][1]["value"] == "now"
    # nats.js reads the provider's writes back through its own mirror bucket: the put, and a delete
    # the delete operator sent through the mirror to the origin.
    deleted = JetStreamKeyValueDeleteOperator(
        task_id=uid("d"), jetstream_conn_id=hub_conn, domain="hub", bucket=copy, key="a"
    ).execute({})
    assert deleted == 6
    caught_up(raw, "hub", f"KV_{copy}", deleted)
    read = nats_js.run("read", domain="hub", bucket=copy, get=["go", "a"])
    assert read["get"]["go"] == entry("go", "now", 5)
    assert read["get"]["a"] == {"key": "a", "value": "", "revision": 6, "operation": "DEL"}
    assert read["keys"] == ["b", "go"]
