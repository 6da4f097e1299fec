"""The hooks' TaskFlow methods against real servers: each sync and async, in the leaf domain and the
hub, missing objects, refused changes (the core's errors, not Airflow's), bad input refused before
anything is sent, one shared connection per event loop, for JetStreamHook and the role hooks alike."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from airflow_provider_jetstream.compat import AirflowFailException
from airflow_provider_jetstream.core.errors import JetStreamConfigError, JetStreamNotFoundError
from airflow_provider_jetstream.core.manage.buckets import KeyValueConflictError, KeyValueError
from airflow_provider_jetstream.core.manage.double_store import DoubleStoreError
from airflow_provider_jetstream.core.manage.reconcile import ReconcileError
from airflow_provider_jetstream.core.publish.engine import JetStreamPublishError
from airflow_provider_jetstream.core.status.replication import ReplicationWatch
from airflow_provider_jetstream.hooks.consumers import JetStreamConsumersHook
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.hooks.kv import JetStreamKeyValueHook
from airflow_provider_jetstream.hooks.publish import JetStreamPublishHook
from airflow_provider_jetstream.hooks.status import JetStreamStatusHook
from airflow_provider_jetstream.hooks.streams import JetStreamStreamsHook
from tests.support.management import QuietServer, Raw, uid
from tests.support.waiting import wait_until


def kv_value(raw: Raw, domain: str, bucket: str, key: str) -> bytes:
    """A key's latest value, read from the bucket's stream without the code under test."""
    reply = raw.api(domain, f"STREAM.MSG.GET.KV_{bucket}", {"last_by_subj": f"$KV.{bucket}.{key}"})
    assert "error" not in reply, reply
    return base64.b64decode(reply["message"]["data"])


# -- declare ---------------------------------------------------------------------------------------


def test_ensure_stream_in_the_leaf_and_a_mirror_in_the_hub(hub_conn, raw) -> None:
    hook = JetStreamHook(hub_conn)
    name = uid("api")
    spec = {"name": name, "subjects": [f"{name}.>"], "max_age": "1h"}

    created = hook.ensure_stream(spec, domain="leaf")
    assert (created["action"], created["domain"], created["name"]) == ("created", "leaf", name)
    assert raw.info("leaf", name)["config"]["subjects"] == [f"{name}.>"]
    assert raw.info("hub", name) is None
    again = asyncio.run(hook.aensure_stream(spec, domain="leaf"))
    assert (again["action"], again["changes"], again["requests"]) == ("unchanged", {}, 1)

    mirror = asyncio.run(hook.aensure_stream({"name": f"{name}-copy", "mirror": {"name": name, "domain": "leaf"}}))
    assert (mirror["action"], mirror["domain"]) == ("created", None)  # the connection's own: the hub's
    assert raw.info("hub", f"{name}-copy")["config"]["mirror"]["external"]["api"] == "$JS.leaf.API"
    in_hub = hook.ensure_stream({"name": f"{name}-copy", "mirror": {"name": name, "domain": "leaf"}}, domain="hub")
    assert (in_hub["action"], in_hub["domain"]) == ("unchanged", "hub")

    planned = hook.ensure_stream({**spec, "max_age": "2h"}, domain="leaf", dry_run=True)
    assert planned["action"] == "planned" and planned["changes"]["max_age"]["new"] == "2h"
    assert raw.info("leaf", name)["config"]["max_age"] == 3600 * 10**9
    updated = JetStreamHook(hub_conn, domain="leaf").ensure_stream({**spec, "max_age": "2h"})  # the hook's domain
    assert updated["action"] == "updated"
    assert raw.info("leaf", name)["config"]["max_age"] == 7200 * 10**9


def test_refused_changes_raise_the_core_errors(hub_conn, raw) -> None:
    hook = JetStreamHook(hub_conn, domain="leaf")
    name = uid("api")
    spec = {"name": name, "subjects": [name]}
    hook.ensure_stream(spec)

    with pytest.raises(ReconcileError, match="storage: 'file' -> 'memory'") as refused:
        hook.ensure_stream({**spec, "storage": "memory"})
    assert not isinstance(refused.value, AirflowFailException)  # failing the task is the operators' business
    with pytest.raises(ReconcileError, match="if_exists='fail'"):
        asyncio.run(hook.aensure_stream(spec, if_exists="fail"))
    assert raw.info("leaf", name)["config"]["storage"] == "file"

    # The same subject in the hub, while the leaf stores it: both would store every message.
    with pytest.raises(DoubleStoreError, match=f"stream {name!r} in domain 'leaf' listens on"):
        hook.ensure_stream({"name": f"{name}-hub", "subjects": [name]}, domain="hub", peer_domains=["leaf"])
    with pytest.raises(DoubleStoreError):
        asyncio.run(hook.aensure_stream({"name": f"{name}-hub", "subjects": [name]}, domain="hub"))
    assert raw.info("hub", f"{name}-hub") is None


def test_ensure_consumer_and_consumer_lag(hub_conn, raw) -> None:
    name = uid("api")
    raw.create("leaf", {"name": name, "subjects": [name]})
    hook = JetStreamHook(hub_conn, domain="leaf")
    consumer = {"name": "dur", "ack_wait": "30s"}

    created = hook.ensure_consumer(name, consumer)
    assert (created["action"], created["stream"], created["domain"]) == ("created", name, "leaf")
    assert asyncio.run(hook.aensure_consumer(name, consumer))["action"] == "unchanged"
    with pytest.raises(ReconcileError, match="if_exists='fail'"):
        hook.ensure_consumer(name, consumer, if_exists="fail")

    raw.publish(name, [b"a", b"b", b"c"], server="leaf")
    # The consumer counts stored messages asynchronously: read once it has counted all three.
    lag = wait_until(lambda: hook.consumer_lag(name, "dur"), lambda check: check.info["num_pending"] == 3)
    assert not lag.done and "unprocessed (num_pending) 3 > max_unprocessed 0" in lag.reason
    within = asyncio.run(hook.aconsumer_lag(name, "dur", max_unprocessed=3))
    assert within.done and within.target == "domain 'leaf'"
    assert within.to_xcom()["num_pending"] == 3 and within.to_xcom()["delivered"]["stream_seq"] == 0

    with pytest.raises(JetStreamNotFoundError, match=f"consumer 'nope' does not exist on stream {name!r}"):
        hook.consumer_lag(name, "nope")
    with pytest.raises(JetStreamNotFoundError, match="does not exist in domain 'hub'"):
        asyncio.run(hook.aconsumer_lag(name, "dur", domain="hub"))  # the stream is the leaf's only

    # The hub's own stream and consumer, through the same hook.
    hub_stream = uid("api")
    raw.create("hub", {"name": hub_stream, "subjects": [hub_stream]})
    assert asyncio.run(hook.aensure_consumer(hub_stream, consumer, domain="hub"))["domain"] == "hub"
    assert hook.consumer_lag(hub_stream, "dur", domain="hub").done


def test_stream_info_in_both_domains_and_missing(hub_conn, raw) -> None:
    name = uid("api")
    raw.create("leaf", {"name": name, "subjects": [name]})
    hook = JetStreamHook(hub_conn)
    info = hook.stream_info(name, domain="leaf")
    assert info["config"]["name"] == name and info["state"]["messages"] == 0
    assert asyncio.run(hook.astream_info(name, domain="leaf"))["config"]["subjects"] == [name]
    with pytest.raises(JetStreamNotFoundError, match=f"stream {name!r} does not exist in domain 'hub'"):
        hook.stream_info(name, domain="hub")
    with pytest.raises(JetStreamNotFoundError, match="does not exist in the local JetStream domain"):
        asyncio.run(hook.astream_info(name))


def test_replication_status_is_the_exact_check(hub_conn, raw) -> None:
    name = uid("api")
    raw.create("leaf", {"name": name, "subjects": [name]})
    hook = JetStreamHook(hub_conn, domain="hub")
    aggregate = f"{name}-all"
    hook.ensure_stream({"name": aggregate, "sources": [{"name": name, "domain": "leaf"}]})
    raw.publish(name, [b"1", b"2"], server="leaf")

    status = wait_until(lambda: hook.replication_status(aggregate), lambda s: s.caught_up)
    (verdict,) = status.verdicts
    assert (verdict.check, verdict.origin_last_seq, verdict.held_seq) == ("exact", 2, 2)
    assert status.done and status.failed is None and status.to_xcom()["messages"] == 2
    assert "caught up" in status.table()

    lag_rule = asyncio.run(hook.areplication_status(aggregate, verify_origin="off"))
    assert [v.check for v in lag_rule.verdicts] == ["lag/active"]
    watch = ReplicationWatch(aggregate)
    assert hook.check_replication(watch).caught_up and watch.target == "domain 'hub'"
    assert asyncio.run(hook.acheck_replication(watch)).caught_up

    with pytest.raises(JetStreamNotFoundError, match="stream 'nope' does not exist in domain 'hub'"):
        hook.replication_status("nope")
    with pytest.raises(JetStreamNotFoundError):
        asyncio.run(hook.areplication_status("nope", domain="leaf"))
    with pytest.raises(JetStreamConfigError, match="has no mirror and no sources"):
        hook.replication_status(name, domain="leaf")  # the origin itself copies nothing
    with pytest.raises(JetStreamConfigError, match="has no mirror or source named 'other'"):
        hook.replication_status(aggregate, origins=["other"])


# -- KV --------------------------------------------------------------------------------------------


def test_kv_put_get_delete_in_the_leaf_and_through_a_hub_mirror(hub_conn, raw) -> None:
    bucket = uid("kv")
    hook = JetStreamHook(hub_conn)
    assert hook.ensure_key_value({"bucket": bucket, "history": 5}, domain="leaf")["action"] == "created"

    first = hook.kv_put(bucket, "site.a", {"rate": 5}, domain="leaf")
    entry = hook.kv_get(bucket, "site.a", domain="leaf")
    assert (json.loads(entry.value), entry.revision) == ({"rate": 5}, first)
    second = asyncio.run(hook.akv_put(bucket, "site.a", "text", domain="leaf", expected_revision=first))
    assert second > first and kv_value(raw, "leaf", bucket, "site.a") == b"text"
    with pytest.raises(KeyValueConflictError, match=f"compare-and-set failed, the latest revision is not {first}"):
        hook.kv_put(bucket, "site.a", "late", domain="leaf", expected_revision=first)
    assert asyncio.run(hook.akv_get(bucket, "site.a", domain="leaf")).value == b"text"
    assert hook.check_key(bucket, "site.a", domain="leaf", value="text").done
    assert not asyncio.run(hook.acheck_key(bucket, "site.a", domain="leaf", after_revision=second)).done

    # A hub mirror as nats.go lays it out: read through the hub, written to its origin in the leaf.
    copy = f"{bucket}-copy"
    made = asyncio.run(hook.aensure_key_value({"bucket": copy, "mirror": {"bucket": bucket, "domain": "leaf"}}))
    assert made["action"] == "created"
    mirrored = wait_until(lambda: hook.kv_get(copy, "site.a", domain="hub"), lambda e: e is not None)
    assert (mirrored.value, mirrored.revision) == (b"text", second)
    hook.kv_put(copy, "site.b", "via the mirror", domain="hub")
    assert kv_value(raw, "leaf", bucket, "site.b") == b"via the mirror"

    marker = hook.kv_delete(bucket, "site.a", domain="leaf")
    assert marker > second and hook.kv_get(bucket, "site.a", domain="leaf") is None
    purged = asyncio.run(hook.akv_delete(bucket, "site.b", domain="leaf", purge=True))
    assert purged > marker and asyncio.run(hook.akv_get(bucket, "site.b", domain="leaf")) is None
    assert hook.check_key(bucket, "site.b", domain="leaf").reason == "key 'site.b' is absent"

    with pytest.raises(JetStreamNotFoundError, match=f"KV bucket {bucket!r} does not exist in domain 'hub'"):
        hook.kv_get(bucket, "site.a", domain="hub")
    with pytest.raises(JetStreamNotFoundError):
        asyncio.run(hook.akv_get("nope", "k", domain="leaf"))
    with pytest.raises(KeyValueError, match="bucket 'nope' does not exist in domain 'leaf'"):
        hook.kv_put("nope", "k", "v", domain="leaf")


# -- publish ---------------------------------------------------------------------------------------


def test_publish_checks_every_ack(hub_conn, raw) -> None:
    name = uid("pub")
    raw.create("leaf", {"name": name, "subjects": [f"{name}.>"]})
    hook = JetStreamHook(hub_conn, domain="leaf")
    messages = [b"x", "y", {"z": 1}]

    summary = hook.publish(f"{name}.a", messages, msg_id="run-1/{index}")
    assert {k: summary[k] for k in ("count", "stored", "duplicates", "first_seq", "last_seq", "stream", "domain")} == {
        "count": 3,
        "stored": 3,
        "duplicates": 0,
        "first_seq": 1,
        "last_seq": 3,
        "stream": name,
        "domain": "leaf",
    }
    retried = asyncio.run(hook.apublish(f"{name}.a", messages, msg_id="run-1/{index}"))
    assert (retried["stored"], retried["duplicates"]) == (0, 3)
    assert raw.info("leaf", name)["state"]["messages"] == 3

    with pytest.raises(JetStreamPublishError, match=r"not stored .*expected stream does not match"):
        hook.publish(f"{name}.a", ["w"], expected_stream="other")
    with pytest.raises(JetStreamPublishError, match="no stream listens on it"):
        asyncio.run(hook.apublish(f"{name}-none.a", ["v"]))

    hub_stream = uid("pub")
    raw.create("hub", {"name": hub_stream, "subjects": [hub_stream]})
    in_hub = asyncio.run(hook.apublish(hub_stream, "one", domain="hub"))
    assert (in_hub["count"], in_hub["stream"], in_hub["domain"]) == (1, hub_stream, "hub")
    # Aimed at the leaf, but the hub stores that subject: refused before sending.
    with pytest.raises(DoubleStoreError):
        hook.publish(hub_stream, ["two"])
    assert raw.info("hub", hub_stream)["state"]["messages"] == 1


# -- refused before anything is sent ---------------------------------------------------------------

BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("ensure_stream", ({"name": "bad name"},), {}, "stream.name='bad name' is not allowed"),
    ("ensure_stream", ({"name": "s", "subjets": ["s"]},), {}, "did you mean 'subjects'"),
    ("ensure_stream", ({"name": "s"},), {"if_exists": "replace"}, "if_exists='replace' is not allowed"),
    ("ensure_stream", ({"name": "s"},), {"dry_run": "yes"}, "dry_run='yes' is not allowed"),
    ("ensure_stream", ({"name": "s"},), {"peer_domains": "leaf"}, "peer_domains='leaf' is not allowed"),
    ("ensure_stream", ({"name": "s"},), {"domain": "leaf", "api_prefix": "JS.acc@hub.API"}, "both given"),
    ("ensure_stream", ({"name": "s"},), {"request_timeout": 0}, "request_timeout=0"),
    ("ensure_consumer", ("bad stream", {"name": "d"}), {}, "stream='bad stream' is not allowed"),
    ("ensure_consumer", ("s", {"name": "d", "ack_wait": "soon"}), {}, "consumer.ack_wait='soon'"),
    ("ensure_key_value", ({"bucket": "b", "history": 0},), {}, "bucket.history=0"),
    ("stream_info", ("a.b",), {}, "stream='a.b' is not allowed"),
    ("consumer_lag", ("s", "c"), {"max_unprocessed": -1}, "max_unprocessed=-1 is not allowed"),
    ("replication_status", ("s",), {"verify_origin": "maybe"}, "verify_origin='maybe' is not allowed"),
    ("replication_status", ("s",), {"origins": []}, "origins=[] is not allowed"),
    ("kv_get", ("b", "bad key"), {}, "key='bad key' is not allowed"),
    ("check_key", ("bad bucket", "k"), {}, "bucket='bad bucket' is not allowed"),
    ("kv_put", ("b", "k", {1, 2}), {}, "value={1, 2} is not allowed"),
    ("kv_put", ("b", "k", "v"), {"expected_revision": -1}, "expected_revision=-1 is not allowed"),
    ("kv_delete", ("b", "k"), {"purge": "yes"}, "purge='yes' is not allowed"),
    ("publish", ("$JS.API.STREAM.DELETE.x", ["a"]), {}, "reserved subject space"),
    ("publish", ("orders.*", ["a"]), {}, "no wildcards"),
    ("publish", ("orders.a", ["a"]), {"headers": {"bad name": "x"}}, "headers name 'bad name' is not allowed"),
    ("publish", ("orders.a", ["a"]), {"max_in_flight": 0}, "max_in_flight=0 is not allowed"),
    ("publish", ("JS.acc@hub.API.STREAM.DELETE.x", ["a"]), {"api_prefix": "JS.acc@hub.API"}, "JetStream API"),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "message"), BAD_CALLS, ids=[f"{c[0]}-{c[3]}" for c in BAD_CALLS])
def test_bad_input_is_refused_before_anything_is_sent(
    quiet_server: QuietServer, quiet_conn: str, method: str, args: tuple, kwargs: dict, message: str
) -> None:
    hook = JetStreamHook(quiet_conn)
    before = quiet_server.traffic()
    with pytest.raises(JetStreamConfigError) as sync_refusal:
        getattr(hook, method)(*args, **kwargs)
    assert message in str(sync_refusal.value)
    with pytest.raises(JetStreamConfigError) as async_refusal:
        asyncio.run(getattr(hook, f"a{method}")(*args, **kwargs))
    assert str(async_refusal.value) == str(sync_refusal.value)
    assert quiet_server.traffic() == before  # no connection, no message


# -- the shared connection and the one bridge -----------------------------------------------------


def test_async_methods_share_one_connection_per_event_loop(quiet_server: QuietServer, quiet_conn: str) -> None:
    hook = JetStreamHook(quiet_conn)
    name = uid("api")
    hook.ensure_stream({"name": name, "subjects": [name]})
    hook.ensure_consumer(name, {"name": "dur"})
    publisher = JetStreamHook(quiet_conn)
    # Its connection settings loaded first, as the other hook's are: all four calls then join the
    # shared connection before the first is done (a user still looking up the Airflow connection
    # after the others left would rightly open a new one).
    publisher.get_conn_config()
    connections_before = quiet_server.traffic()[0]

    async def together() -> list[Any]:
        return await asyncio.gather(
            hook.astream_info(name),
            hook.aensure_stream({"name": name, "subjects": [name]}),
            hook.aconsumer_lag(name, "dur"),
            publisher.apublish(name, ["a", "b"]),
        )

    info, ensured, lag, published = asyncio.run(together())
    assert quiet_server.traffic()[0] == connections_before + 1
    assert (info["config"]["name"], ensured["action"], published["stored"]) == (name, "unchanged", 2)
    assert lag.to_xcom()["num_pending"] in (0, 1, 2)  # read before, during or after the publish


def test_role_hooks_work_alone_and_share_one_connection_per_event_loop(
    quiet_server: QuietServer, quiet_conn: str
) -> None:
    """Each role is a hook of its own (what an operator uses); roles in one event loop share one connection."""
    streams, consumers = JetStreamStreamsHook(quiet_conn), JetStreamConsumersHook(quiet_conn)
    kv, publisher, status = (
        JetStreamKeyValueHook(quiet_conn),
        JetStreamPublishHook(quiet_conn),
        JetStreamStatusHook(quiet_conn),
    )
    name, bucket = uid("role"), uid("rolekv")
    assert streams.ensure_stream({"name": name, "subjects": [name]})["action"] == "created"
    assert consumers.ensure_consumer(name, {"name": "dur"})["action"] == "created"
    assert kv.ensure_key_value(bucket)["action"] == "created"
    for hook in (streams, consumers, kv, publisher, status):
        hook.get_conn_config()  # every role's settings loaded: the calls below join one connection
    connections_before = quiet_server.traffic()[0]

    async def together() -> list[Any]:
        return await asyncio.gather(
            streams.astream_info(name),
            publisher.apublish(name, ["a", "b"]),
            kv.akv_put(bucket, "k", "v"),
            status.aconsumer_lag(name, "dur", max_unprocessed=10),
        )

    info, published, revision, lag = asyncio.run(together())
    assert quiet_server.traffic()[0] == connections_before + 1
    assert (info["config"]["name"], published["stored"], revision) == (name, 2, 1) and lag.done
    # A role hook has only its role's methods; JetStreamHook has every role's, and role() moves between them.
    assert not hasattr(streams, "publish") and not hasattr(publisher, "ensure_stream")
    assert streams.role(JetStreamConsumersHook).delete_consumer(name, "dur")["deleted"] is True
    combined = JetStreamHook(quiet_conn)
    assert combined.role(JetStreamStatusHook) is combined


def test_blocking_methods_refuse_inside_a_running_event_loop(quiet_conn: str) -> None:
    async def misuse() -> None:
        JetStreamHook(quiet_conn).stream_info("anything")

    with pytest.raises(RuntimeError, match="await the coroutine instead"):
        asyncio.run(misuse())
