"""KV operators: buckets (with mirrors and sources across domains) that nats-py reads, domain-aware writes."""

from __future__ import annotations

import asyncio
import base64
import time

import nats
import nats.js.errors
import pytest

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.errors import (
    DoubleStoreError,
    KeyValueConflictError,
    KeyValueError,
    ReconcileError,
    SpecErrors,
)
from airflow_provider_jetstream.core.manage.buckets import BucketLayout, bucket_layout, kv_get, write_target
from airflow_provider_jetstream.operators.kv import (
    JetStreamCreateKeyValueOperator,
    JetStreamKeyValueDeleteOperator,
    JetStreamKeyValuePutOperator,
)
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.management import uid


def bucket(conn: str, spec, domain: str = "leaf", **kwargs) -> dict:
    return JetStreamCreateKeyValueOperator(
        task_id=uid("b"), jetstream_conn_id=conn, domain=domain, bucket=spec, **kwargs
    ).execute({})


def put(conn: str, name: str, key: str, value, domain: str = "leaf", **kwargs) -> int:
    return JetStreamKeyValuePutOperator(
        task_id=uid("p"), jetstream_conn_id=conn, domain=domain, bucket=name, key=key, value=value, **kwargs
    ).execute({})


def nats_py_get(topology, domain: str, name: str, key: str, timeout: float = 60.0, provider: bool = False):
    """What nats-py's own KV client reads (retrying while a mirror or source catches up).

    ``provider``: read with :func:`kv_get`, which reads a mirror bucket where its stream stores the
    keys (nats-py's ``key_value`` does not know the mirror layout).
    """

    async def go():
        user, password = USERS["ACC"]
        nc = await nats.connect(topology.hub.url, user=user, password=password)
        try:
            js = nc.jetstream(domain=domain)
            api = JetStreamApi(nc, f"$JS.{domain}.API")
            kv = None if provider else await js.key_value(name)
            deadline = time.monotonic() + timeout
            while True:
                try:
                    entry = await kv_get(api, name, key) if provider else await kv.get(key)
                    if entry is None:
                        raise nats.js.errors.KeyNotFoundError
                    return entry.value, entry.revision
                except nats.js.errors.KeyNotFoundError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
        finally:
            await nc.close()

    return asyncio.run(go())


def test_bucket_reconcile_and_nats_py_reads_it(hub_conn, hub_leaf, raw) -> None:
    name = uid("cfg")
    spec = {"bucket": name, "history": 5, "ttl": "1h", "max_value_size": 1024, "compression": True}
    assert bucket(hub_conn, spec)["action"] == "created"
    again = bucket(hub_conn, spec)
    assert again["action"] == "unchanged" and again["requests"] == 1 and again["name"] == name
    assert bucket(hub_conn, {**spec, "history": 10})["changes"]["max_msgs_per_subject"]["new"] == "10"
    with pytest.raises(ReconcileError, match=r"storage: 'file' -> 'memory'"):
        bucket(hub_conn, {**spec, "history": 10, "storage": "memory"})
    revision = put(hub_conn, name, "site.a", {"x": 1})
    assert nats_py_get(hub_leaf, "leaf", name, "site.a") == (b'{"x":1}', revision)


def test_kv_mirror_and_sources_across_domains(hub_conn, hub_leaf, raw) -> None:
    origin = uid("origin")
    bucket(hub_conn, origin)
    first = put(hub_conn, origin, "k", "v1")
    copy = uid("copy")
    mirror = bucket(hub_conn, {"bucket": copy, "mirror": {"bucket": origin, "domain": "leaf"}}, domain="hub")
    assert mirror["action"] == "created"
    assert (
        bucket(hub_conn, {"bucket": copy, "mirror": {"bucket": origin, "domain": "leaf"}}, domain="hub")["action"]
        == "unchanged"
    )
    # Laid out as nats.go / nats.js lay out a KV mirror (ADR-8): the origin's subjects, mirror_direct.
    config = raw.info("hub", f"KV_{copy}")["config"]
    assert config["mirror"] == {"name": f"KV_{origin}", "external": {"api": "$JS.leaf.API", "deliver": ""}}
    assert config["mirror_direct"] is True and "subjects" not in config
    assert nats_py_get(hub_leaf, "hub", copy, "k", provider=True) == (b"v1", first)
    # A put to the mirror goes to its origin (in the leaf), as nats.go does; the mirror then copies it.
    revision = put(hub_conn, copy, "k", "v2", domain="hub")
    assert nats_py_get(hub_leaf, "leaf", origin, "k")[0] == b"v2"
    deadline = time.monotonic() + 60
    while nats_py_get(hub_leaf, "hub", copy, "k", provider=True)[0] != b"v2":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert revision == first + 1

    agg = uid("agg")
    sourced = bucket(
        hub_conn,
        {"bucket": agg, "sources": [{"bucket": origin, "domain": "leaf"}]},
        domain="hub",
        options={"allow_double_store": False},
    )
    assert sourced["action"] == "created"
    assert nats_py_get(hub_leaf, "hub", agg, "k")[0] == b"v2"


def test_same_bucket_in_hub_and_leaf_is_refused_and_writes_stay_in_their_domain(hub_conn, hub_leaf, raw) -> None:
    name = uid("dup")
    bucket(hub_conn, name, domain="hub")
    with pytest.raises(DoubleStoreError) as err:
        bucket(hub_conn, name, domain="leaf")
    text = str(err.value)
    assert f"bucket {name!r} also exists in 'hub'" in text and f"$KV.{name}.<key>" in text
    assert "use different accounts in each domain or isolate accounts" in text and "allow_double_store=True" in text
    assert raw.info("leaf", f"KV_{name}") is None

    assert bucket(hub_conn, name, domain="leaf", options={"allow_double_store": True})["action"] == "created"
    # Our put aimed at the leaf lands in the leaf, although the client is attached to the hub.
    put(hub_conn, name, "k", "for-leaf", domain="leaf")
    assert raw.info("leaf", f"KV_{name}")["state"]["messages"] == 1
    assert raw.info("hub", f"KV_{name}")["state"]["messages"] == 0

    # nats-py's own put "to the leaf" (kv.put on a KV opened with domain="leaf") lands in the hub:
    # the bug this module exists for.
    async def nats_py_put() -> int:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        try:
            kv = await nc.jetstream(domain="leaf").key_value(name)
            return await kv.put("k2", b"x")
        finally:
            await nc.close()

    revision = asyncio.run(nats_py_put())
    hub_copy = raw.api("hub", f"STREAM.MSG.GET.KV_{name}", {"last_by_subj": f"$KV.{name}.k2"})
    assert "message" in hub_copy, hub_copy
    assert hub_copy["message"]["seq"] == revision and base64.b64decode(hub_copy["message"]["data"]) == b"x"
    assert raw.info("hub", f"KV_{name}")["state"]["messages"] == 1
    assert "error" in raw.api("leaf", f"STREAM.MSG.GET.KV_{name}", {"last_by_subj": f"$KV.{name}.k2"})


def test_compare_and_set_and_delete(hub_conn, hub_leaf) -> None:
    name = uid("cas")
    bucket(hub_conn, {"bucket": name, "history": 3})
    first = put(hub_conn, name, "k", "a", expected_revision=0)  # create only
    with pytest.raises(KeyValueConflictError, match="compare-and-set failed"):
        put(hub_conn, name, "k", "b", expected_revision=0)
    second = put(hub_conn, name, "k", "b", expected_revision=first)
    with pytest.raises(KeyValueConflictError):
        put(hub_conn, name, "k", "c", expected_revision=first)
    assert nats_py_get(hub_leaf, "leaf", name, "k") == (b"b", second)
    JetStreamKeyValueDeleteOperator(
        task_id="d", jetstream_conn_id=hub_conn, domain="leaf", bucket=name, key="k"
    ).execute({})

    async def gone() -> bool:
        user, password = USERS["ACC"]
        nc = await nats.connect(hub_leaf.hub.url, user=user, password=password)
        try:
            kv = await nc.jetstream(domain="leaf").key_value(name)
            try:
                await kv.get("k")
            except nats.js.errors.KeyNotFoundError:
                return True
            return False
        finally:
            await nc.close()

    assert asyncio.run(gone())


def legacy_mirror_config(copy: str, origin: str) -> dict:
    """The stream config this provider's earlier releases sent for a KV mirror of another domain's bucket."""
    return {
        "name": f"KV_{copy}",
        "max_msgs_per_subject": 1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msg_size": -1,
        "storage": "file",
        "num_replicas": 1,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
        "discard": "new",
        "max_msgs": -1,
        "max_consumers": -1,
        "duplicate_window": 120_000_000_000,
        "mirror": {
            "name": f"KV_{origin}",
            "external": {"api": "$JS.leaf.API"},
            "subject_transforms": [{"src": f"$KV.{origin}.>", "dest": f"$KV.{copy}.>"}],
        },
        "mirror_direct": True,
    }


def test_legacy_mirror_bucket_is_still_read_and_its_migration_is_spelled_out(hub_conn, hub_leaf, raw) -> None:
    origin, copy = uid("origin"), uid("legacy")
    bucket(hub_conn, {"bucket": origin, "history": 5})
    first = put(hub_conn, origin, "k", "v1")
    raw.create("hub", legacy_mirror_config(copy, origin))
    # The provider's reads follow the old layout ($KV.<copy>.k), its writes still go to the origin.
    assert nats_py_get(hub_leaf, "hub", copy, "k", provider=True) == (b"v1", first)
    second = put(hub_conn, copy, "k", "v2", domain="hub")
    deadline = time.monotonic() + 15
    while nats_py_get(hub_leaf, "hub", copy, "k", provider=True) != (b"v2", second):
        assert time.monotonic() < deadline
        time.sleep(0.1)

    spec = {"bucket": copy, "mirror": {"bucket": origin, "domain": "leaf"}}
    for dry_run in (False, True):
        with pytest.raises(ReconcileError) as err:
            bucket(hub_conn, spec, domain="hub", options={"dry_run": dry_run})
        text = str(err.value)
        assert f"bucket {copy!r} in domain 'hub' cannot be changed in place" in text
        assert f"mirror: 'KV_{origin}' in domain 'leaf' transforms=$KV.{origin}.>->$KV.{copy}.> -> " in text
        assert f"a mirror made by an older release of this provider: it stores the keys of {origin!r} under " in text
        assert f"$KV.{copy}.> (a subject transform), where nats.go and nats.js do not look" in text
        assert f"(a) run this operator with if_exists='recreate': it deletes the stream 'KV_{copy}' in domain" in text
        assert f"copies again everything the origin {origin!r} in domain 'leaf' still holds, with the same" in text
        assert f"bucket={{'bucket': '{copy}-v2', 'mirror': {{'bucket': '{origin}', 'domain': 'leaf'}}}}" in text
        assert f"JetStreamDeleteStreamOperator(name='KV_{copy}') in domain 'hub'" in text
        assert text.endswith("nothing was changed")
    assert raw.info("hub", f"KV_{copy}")["config"]["mirror"]["subject_transforms"]  # untouched

    recreated = bucket(hub_conn, spec, domain="hub", if_exists="recreate")
    assert recreated["action"] == "recreated"
    assert any("a mirror made by an older release" in note for note in recreated["notes"])
    config = raw.info("hub", f"KV_{copy}")["config"]
    assert "subject_transforms" not in config["mirror"]
    # Re-mirrored from the origin, with the origin's revisions, now under $KV.<origin>.
    assert nats_py_get(hub_leaf, "hub", copy, "k", provider=True) == (b"v2", second)
    assert bucket(hub_conn, spec, domain="hub")["action"] == "unchanged"


def test_bucket_layout_from_the_stream_config() -> None:
    assert bucket_layout("b", {"name": "KV_b", "subjects": ["$KV.b.>"]}) == BucketLayout("b", "KV_b", "$KV.b.")
    official = {"name": "KV_copy", "mirror": {"name": "KV_o", "external": {"api": "$JS.leaf.API"}}}
    assert bucket_layout("copy", official) == BucketLayout("copy", "KV_copy", "$KV.o.", "o")
    same_domain = {"name": "KV_copy", "mirror": {"name": "KV_o"}}  # the keys are the origin's here too
    assert bucket_layout("copy", same_domain) == BucketLayout("copy", "KV_copy", "$KV.o.", "o")
    legacy = {
        "name": "KV_copy",
        "mirror": {**official["mirror"], "subject_transforms": [{"src": "$KV.o.>", "dest": "$KV.copy.>"}]},
    }
    assert bucket_layout("copy", legacy) == BucketLayout("copy", "KV_copy", "$KV.copy.", "o", legacy_mirror=True)
    odd = {"name": "KV_copy", "mirror": {"name": "KV_o", "subject_transforms": [{"src": "$KV.o.a.>", "dest": "x.>"}]}}
    with pytest.raises(KeyValueError, match="no KV client can tell where its keys are"):
        bucket_layout("copy", odd)


def test_write_subjects_match_nats_go() -> None:
    assert write_target("b", "k", "$JS.API").subject == "$KV.b.k"
    assert write_target("b", "k", "$JS.leaf.API").subject == "$JS.leaf.API.$KV.b.k"
    assert write_target("b", "k", "JS.acc@hub.API").subject == "JS.acc@hub.API.$KV.b.k"
    mirror = {"mirror": {"name": "KV_o", "external": {"api": "$JS.leaf.API"}}}
    target = write_target("copy", "k", "$JS.hub.API", mirror)
    assert (target.subject, target.stream, target.domain) == ("$JS.leaf.API.$KV.o.k", "KV_o", "leaf")


def test_kv_validation() -> None:
    with pytest.raises(SpecErrors, match=r"key='\.bad'"):
        JetStreamKeyValuePutOperator(task_id="x", bucket="b", key=".bad", value="v")
    with pytest.raises(SpecErrors, match=r"expected_revision=-1"):
        JetStreamKeyValuePutOperator(task_id="x", bucket="b", key="k", value="v", expected_revision=-1)
    with pytest.raises(SpecErrors, match=r"bucket\.history=0"):
        JetStreamCreateKeyValueOperator(task_id="x", bucket={"bucket": "b", "history": 0})
